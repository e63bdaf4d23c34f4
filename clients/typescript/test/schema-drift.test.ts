// src/schema.ts is what openapi-typescript makes of the server's /openapi.json, byte for byte.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { URL_ } from "./helpers.js";

// Plain JavaScript shared with `npm run generate`, found from the compiled test (build-test/test/).
const { GENERATED, REGENERATE, schemaSource } = (await import(new URL("../../scripts/schema.mjs", import.meta.url).href)) as {
  GENERATED: URL;
  REGENERATE: string;
  schemaSource: (document: unknown) => Promise<string>;
};

test("the committed types match the server's OpenAPI schema", async () => {
  const response = await fetch(`${URL_}/openapi.json`);
  assert.equal(response.status, 200);
  const fresh = await schemaSource(await response.json());
  const committed = readFileSync(GENERATED, "utf-8");
  assert.ok(
    fresh === committed,
    `src/schema.ts differs from what ${URL_}/openapi.json generates: the server's API changed. ` +
      `Regenerate it with \`${REGENERATE}\` (or \`npm run generate -- --url ${URL_}\`), then rebuild and commit it.`,
  );
});
