// `npm run generate`: writes src/schema.ts from epimem's OpenAPI schema.
//   npm run generate                       the schema of the app in this repository (built in Python, no server)
//   npm run generate -- --url URL          the /openapi.json of a running server (e.g. http://127.0.0.1:8000)
// EPIMEM_PYTHON overrides the Python interpreter (default: the repository's .venv).
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { GENERATED, schemaSource } from "./schema.mjs";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const PRINT_SCHEMA = [
  "import json",
  "from api.server import create_app",
  "from api.settings import Settings",
  "print(json.dumps(create_app(settings=Settings(api_keys_file=None)).openapi()))",
].join("\n");

function appSchema() {
  const python = process.env.EPIMEM_PYTHON ?? `${REPO}.venv/bin/python`;
  const env = { ...process.env, HF_HUB_OFFLINE: "1", ANONYMIZED_TELEMETRY: "False" };
  delete env.EPIMEM_API_KEYS_FILE;
  return JSON.parse(execFileSync(python, ["-c", PRINT_SCHEMA], { cwd: REPO, env, maxBuffer: 64 << 20 }).toString());
}

async function serverSchema(url) {
  const response = await fetch(new URL("/openapi.json", url));
  if (!response.ok) throw new Error(`GET ${url}/openapi.json answered ${response.status}`);
  return response.json();
}

const at = process.argv.indexOf("--url");
const document = at >= 0 ? await serverSchema(process.argv[at + 1]) : appSchema();
writeFileSync(GENERATED, await schemaSource(document));
console.log(`wrote ${fileURLToPath(GENERATED)}`);
