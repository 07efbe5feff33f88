#!/usr/bin/env node
// Generates src/api/schema.d.ts from the control plane's OpenAPI document with the pinned
// openapi-typescript, as its CLI would (same header), with one option: emptyObjectsUnknown (see
// below). Operations are keyed by their operationId, which the server keeps unique (a control-plane
// unit test, `every_operation_has_an_id_of_its_own`).
//
//   node scripts/gen-api.mjs <URL or file of openapi.json> <output .d.ts>
//
// `npm run gen:api` runs it against a running control plane; scripts/api-fuzz.sh (`make test`)
// runs it against the one it starts and fails when the output differs from the committed file.
import fs from "node:fs";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const [source, output] = process.argv.slice(2);
if (!source || !output) {
  console.error("usage: node scripts/gen-api.mjs <URL or file of openapi.json> <output .d.ts>");
  process.exit(2);
}

const text = /^https?:\/\//.test(source)
  ? await fetch(source).then((r) => {
      if (!r.ok) throw new Error(`${source}: HTTP ${r.status}`);
      return r.text();
    })
  : fs.readFileSync(source, "utf8");
const doc = JSON.parse(text);

// openapi-typescript's own configuration (Redocly's "minimal" rules, which the CLI uses too). emptyObjectsUnknown: a free-form object (a policy's
// `params`, an audit entry's `detail`: `type: object` and nothing more) is Record<string, unknown>,
// not Record<string, never>, which no object with a field could be sent as.
const ast = await openapiTS(doc, { silent: true, emptyObjectsUnknown: true });
fs.writeFileSync(output, `${COMMENT_HEADER}${astToString(ast)}`, "utf8");
