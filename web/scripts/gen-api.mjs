#!/usr/bin/env node
// Generates src/api/schema.d.ts from the control plane's OpenAPI document with the pinned
// openapi-typescript, as its CLI would (same header), with one option and one repair:
// - emptyObjectsUnknown (see below);
// - an operationId that several operations share (utoipa names an operation after its handler, and
//   several modules have a `list` or a `detail`; OpenAPI requires them unique) is dropped from
//   those operations, so they are written inline in `paths`. Otherwise every such path refers to
//   one `operations["list"]`, and GET /workloads is typed as GET /decisions. It says which it drops;
//   once the server's ids are unique, the repair does nothing.
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

const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
const byId = new Map();
for (const [path, item] of Object.entries(doc.paths ?? {})) {
  for (const method of METHODS) {
    const op = item?.[method];
    if (op?.operationId) byId.set(op.operationId, [...(byId.get(op.operationId) ?? []), { path, method, op }]);
  }
}
for (const [id, uses] of byId) {
  if (uses.length < 2) continue;
  console.warn(`gen-api: operationId "${id}" is used by ${uses.map((u) => `${u.method.toUpperCase()} ${u.path}`).join(", ")}: written inline`);
  for (const { op } of uses) delete op.operationId;
}

// openapi-typescript's own configuration (Redocly's "minimal" rules, which the CLI uses too, and
// unique operationIds, which now hold). emptyObjectsUnknown: a free-form object (a policy's
// `params`, an audit entry's `detail`: `type: object` and nothing more) is Record<string, unknown>,
// not Record<string, never>, which no object with a field could be sent as.
const ast = await openapiTS(doc, { silent: true, emptyObjectsUnknown: true });
fs.writeFileSync(output, `${COMMENT_HEADER}${astToString(ast)}`, "utf8");
