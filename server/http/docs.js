// Starts Swagger UI on this service's own document (GET /openapi.json, beside
// this page). The validator badge is off: it would send the document to
// validator.swagger.io.
"use strict";
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    displayRequestDuration: true,
  });
});
