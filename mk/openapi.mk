# The OpenAPI document and its page are built into server/openapi.o with
# .incbin, which the compiler's dependency files do not record.
$(BUILD)/obj/server/openapi.o: server/openapi.json server/docs.html

# The committed document is what scripts/gen_openapi.py writes.
.PHONY: openapi-check
openapi-check:
	@python3 scripts/gen_openapi.py --check
