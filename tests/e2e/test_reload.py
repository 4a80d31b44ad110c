"""SIGHUP applies every reloadable setting through the settings table on every
reload, whether or not its value changed, the logging settings first, so what
applying the others logs follows the new level."""
import requests

from conftest import wait_for


def info(s):
    return requests.get(s.url("/info"), timeout=5).json()


def test_log_settings_apply_before_the_rest(start_server):
    s = start_server()
    assert info(s)["backend"] == "naive"
    s.reload(backend="fused", log_level="warn")
    wait_for(lambda: info(s)["backend"] == "fused", what="the backend switch")
    # Back to info: this reload's last line says the first one has finished.
    s.reload(log_level="info")
    wait_for(lambda: "configuration reloaded" in s.log_text(), what="the second reload")
    log = s.log_text()
    # The switch logs at info, which the first reload had already turned off.
    assert "backend switched" not in log, log
    assert log.count("configuration reloaded") == 1, log


def test_a_reload_rereads_the_key_file_when_no_setting_changed(start_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("old-key\n")
    s = start_server(api_key_file=str(keys))

    def status(key):
        return requests.get(s.url("/info"), headers={"Authorization": "Bearer " + key},
                            timeout=5).status_code

    assert status("old-key") == 200
    keys.write_text("new-key\n")
    s.reload()
    wait_for(lambda: status("new-key") == 200, what="the new key")
    assert status("old-key") == 401
