// The TypeScript examples of the docs run as written: every ```ts block right after
// `<!-- tested: clients/typescript/test/docs.test.ts -->` in docs/*.md is type-checked against the built package
// (strict), compiled, and run with Node against the tests' server; each prints, and exits 0.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ADMIN_KEY, URL_ } from "./helpers.js";

const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
const DOCS = join(PACKAGE, "..", "..", "docs");
const MARKER = "<!-- tested: clients/typescript/test/docs.test.ts -->";
// Inside the package, so that `import ... from "epimem-client"` finds the package itself (its `exports`).
const WORK = join(PACKAGE, "build-test", "docs-examples");

function examples(): { name: string; code: string }[] {
  const found: { name: string; code: string }[] = [];
  for (const page of readdirSync(DOCS).filter((name) => name.endsWith(".md")).sort()) {
    const text = readFileSync(join(DOCS, page), "utf-8");
    const blocks = text.matchAll(new RegExp(`${MARKER}\\n\`\`\`ts\\n([\\s\\S]*?)\\n\`\`\``, "g"));
    let index = 0;
    for (const block of blocks) found.push({ name: `${page.replace(/\.md$/, "")}-${++index}`, code: block[1]! });
  }
  return found;
}

/** Node with these arguments, in the package; its stdout (it must exit 0). */
function run(args: string[], env: NodeJS.ProcessEnv): string {
  const done = spawnSync(process.execPath, args, { cwd: PACKAGE, env, encoding: "utf-8" });
  assert.equal(done.status, 0, `node ${args.join(" ")} failed:\n${done.stdout}\n${done.stderr}`);
  return done.stdout;
}

const found = examples();

test("the docs have TypeScript examples", () => {
  assert.ok(found.length >= 1, `no \`\`\`ts block after ${MARKER} in ${DOCS}`);
});

for (const example of found) {
  test(`docs example ${example.name} type-checks and runs`, () => {
    rmSync(WORK, { recursive: true, force: true });
    mkdirSync(WORK, { recursive: true });
    try {
      const source = join(WORK, `${example.name}.ts`);
      writeFileSync(source, example.code);
      const tsc = join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
      const options = ["--strict", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext"];
      run([tsc, ...options, "--types", "node", "--skipLibCheck", "--rootDir", WORK, "--outDir", WORK, source], process.env);
      const env = { ...process.env, EPIMEM_URL: URL_, EPIMEM_API_KEY: ADMIN_KEY ?? "" };
      const output = run([join(WORK, `${example.name}.js`)], env);
      assert.ok(output.trim().length > 0, "the example printed nothing");
      const expected = /\/\/ prints: (.*)$/m.exec(example.code)?.[1];
      if (expected) assert.ok(output.includes(expected), `expected ${JSON.stringify(expected)} in:\n${output}`);
    } finally {
      rmSync(WORK, { recursive: true, force: true });
    }
  });
}
