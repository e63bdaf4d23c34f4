// `npm test`: starts a real epimem (`epimem serve` from the repository's .venv, on a free port, on a temporary
// data folder, with an API keys file), runs the tests (node --test) against it, and stops it and removes the
// folder, whatever happened. With EPIMEM_URL set, the tests use that server instead (EPIMEM_API_KEY: a key for
// every group, '*', when it has keys; the tests that need keys of their own are then skipped).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { KEYS } from "./keys.js";

const PACKAGE = fileURLToPath(new URL("../../", import.meta.url)); // build-test/test/ -> clients/typescript/
const REPO = join(PACKAGE, "..", "..");
const EPIMEM = process.env.EPIMEM_BIN ?? join(REPO, ".venv", "bin", "epimem");
const READY_TIMEOUT_MS = 180_000;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

async function waitReady(url: string, server: ChildProcess, log: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (server.exitCode !== null) throw new Error(`epimem serve exited with ${server.exitCode}:\n${tail(log)}`);
    if (Date.now() > deadline) throw new Error(`epimem serve did not become ready:\n${tail(log)}`);
    // readyz: store reachable and model loaded; `recovering` false: startup recovery will not form our episodes.
    const ready = await fetch(`${url}/readyz`).then(
      async (response) => response.ok && !((await response.json()) as { recovering: boolean }).recovering,
      () => false, // not listening yet
    );
    if (ready) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

function tail(path: string): string {
  return readFileSync(path, "utf-8").slice(-3000);
}

function stop(server: ChildProcess): Promise<void> {
  if (server.exitCode !== null || server.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => server.kill("SIGKILL"), 30_000);
    server.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    server.kill("SIGTERM");
  });
}

function runTests(env: NodeJS.ProcessEnv): Promise<number> {
  const folder = fileURLToPath(new URL(".", import.meta.url));
  const files = readdirSync(folder)
    .filter((name) => name.endsWith(".test.js"))
    .map((name) => join(folder, name));
  const child = spawn(process.execPath, ["--test", "--test-concurrency=1", ...files], { env, stdio: "inherit" });
  return new Promise((resolve) => child.once("exit", (code) => resolve(code ?? 1)));
}

async function main(): Promise<number> {
  if (process.env.EPIMEM_URL) return runTests(process.env);
  const folder = mkdtempSync(join(tmpdir(), "epimem-ts-"));
  const keysFile = join(folder, "keys.json");
  writeFileSync(keysFile, JSON.stringify({ keys: Object.values(KEYS) }));
  const log = join(folder, "server.log");
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env = { ...process.env, HF_HUB_OFFLINE: "1", ANONYMIZED_TELEMETRY: "False", EPIMEM_API_KEYS_FILE: keysFile };
  const output = openSync(log, "a");
  const args = ["serve", "--host", "127.0.0.1", "--port", String(port), "--data-dir", join(folder, "data")];
  const server = spawn(EPIMEM, args, { env, stdio: ["ignore", output, output] });
  const spawned = new Promise<void>((resolve, reject) => {
    server.once("spawn", resolve);
    server.once("error", (error) => reject(new Error(`cannot start ${EPIMEM} (${error.message}); create the venv: ` +
      "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'")));
  });
  const interrupted = () => void stop(server).finally(() => process.exit(130));
  process.once("SIGINT", interrupted).once("SIGTERM", interrupted);
  try {
    await spawned;
    await waitReady(url, server, log);
    const code = await runTests({ ...process.env, EPIMEM_URL: url, EPIMEM_API_KEY: KEYS.adminAll.key, EPIMEM_TEST_KEYS: "1" });
    if (code !== 0) console.error(`the server's log: ${tail(log)}`);
    return code;
  } finally {
    await stop(server);
    rmSync(folder, { recursive: true, force: true });
  }
}

process.exitCode = await main();
