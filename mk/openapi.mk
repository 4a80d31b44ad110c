# The OpenAPI document and the /docs page's files are built into
# server/http/openapi.o with .incbin, which the compiler's dependency files do
# not record. Swagger UI's files come from SWAGGER_UI_DIR, where
# scripts/install-deps.sh puts them (scripts/get-swagger-ui.sh, a pinned PyPI
# wheel); another folder: scripts/get-swagger-ui.sh DIR, then
# make SWAGGER_UI_DIR=DIR.
SWAGGER_UI_DIR ?= $(shell scripts/get-swagger-ui.sh --dir)
SWAGGER_UI_FILES := $(addprefix $(SWAGGER_UI_DIR)/,swagger-ui-bundle.js swagger-ui.css \
    favicon-32x32.png LICENSE VERSION)
$(BUILD)/obj/server/http/openapi.o: server/http/openapi.json server/http/docs.html \
    server/http/docs.js $(SWAGGER_UI_FILES)
# private: the flags file this object depends on must not see the folder.
$(BUILD)/obj/server/http/openapi.o: private CFLAGS += -DSWAGGER_UI_DIR='"$(SWAGGER_UI_DIR)"'

$(SWAGGER_UI_FILES):
	@echo "$@ is missing: run scripts/install-deps.sh" >&2
	@exit 1

# The committed document is what scripts/gen_openapi.py writes.
.PHONY: openapi-check
openapi-check:
	@python3 scripts/gen_openapi.py --check
