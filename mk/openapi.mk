# The OpenAPI document and its page are built into server/http/openapi.o with
# .incbin, which the compiler's dependency files do not record.
$(BUILD)/obj/server/http/openapi.o: server/http/openapi.json server/http/docs.html

# The committed document is what scripts/gen_openapi.py writes.
.PHONY: openapi-check
openapi-check:
	@python3 scripts/gen_openapi.py --check
