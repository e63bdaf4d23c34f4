// Every failure is an EpimemError: the server's one error shape, network failures, timeouts; the opt-in retry
// of a 503 after its Retry-After.
import assert from "node:assert/strict";
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import { EpimemError, EpimemClient } from "epimem-client";
import { ADMIN_KEY, CHAT, URL_, client, newGroup } from "./helpers.js";

const memory = client();
const group = newGroup("errors");
after(async () => {
  await memory.deleteGroup(group);
});

async function failure(promise: Promise<unknown>): Promise<EpimemError> {
  const error = await promise.then(
    () => assert.fail("expected an EpimemError"),
    (error: unknown) => error,
  );
  assert.ok(error instanceof EpimemError, `not an EpimemError: ${String(error)}`);
  return error;
}

test("invalid input: 422 invalid_input with the server's message and details", async () => {
  const error = await failure(memory.search(group, { query: "dog", k: 500 }));
  assert.equal(error.status, 422);
  assert.equal(error.code, "invalid_input");
  assert.match(error.message, /k/);
  assert.ok(Array.isArray(error.details));
  assert.deepEqual((error.details as { loc: unknown[] }[])[0]!.loc, ["body", "k"]);
});

test("unknown episode: 404 not_found", async () => {
  await memory.addMessages(group, "s", CHAT);
  const error = await failure(memory.getEpisode(group, "s", "no-such-episode"));
  assert.equal(error.status, 404);
  assert.equal(error.code, "not_found");
});

test("a known message id with other content: 409 conflict, nothing of the batch written", async () => {
  const error = await failure(
    memory.addMessages(group, "s", [{ id: "fresh", content: "new" }, { id: "m1", content: "other text" }]),
  );
  assert.equal(error.status, 409);
  assert.equal(error.code, "conflict");
  assert.ok(!(await memory.history(group, "s")).messages.some((m) => m.id === "fresh"));
});

test("an id with '/' cannot be addressed and is refused before sending", async () => {
  const error = await failure(memory.history(group, "a/b"));
  assert.equal(error.status, 0);
  assert.equal(error.code, "invalid_input");
});

test("nothing listening: network_error", async () => {
  const port = await closedPort();
  const error = await failure(new EpimemClient({ baseUrl: `http://127.0.0.1:${port}` }).listSessions(group));
  assert.equal(error.status, 0);
  assert.equal(error.code, "network_error");
  assert.ok(error.cause);
});

test("no answer in time: timeout", async () => {
  const silent = await listen(createServer(() => undefined)); // accepts, never answers
  try {
    const started = Date.now();
    const error = await failure(new EpimemClient({ baseUrl: silent.url, timeoutMs: 300 }).listSessions(group));
    assert.equal(error.code, "timeout");
    assert.equal(error.status, 0);
    assert.ok(Date.now() - started < 5000);
  } finally {
    await silent.close();
  }
});

test("503 with Retry-After: thrown as is by default, retried when asked", async () => {
  // A proxy in front of the real server that answers its first request with epimem's 503.
  let refused = 0;
  const proxy = await listen(
    createServer((incoming, outgoing) => {
      if (refused === 0) {
        refused++;
        outgoing.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
        outgoing.end(JSON.stringify({ error: { code: "store_unavailable", message: "store down", details: null } }));
        return;
      }
      const target = new URL(incoming.url ?? "/", URL_);
      const forward = httpRequest(target, { method: incoming.method, headers: incoming.headers }, (answer) => {
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(outgoing);
      });
      incoming.pipe(forward);
    }),
  );
  try {
    const plain = await failure(new EpimemClient({ baseUrl: proxy.url, apiKey: ADMIN_KEY }).listSessions(group));
    assert.equal(plain.status, 503);
    assert.equal(plain.code, "store_unavailable");
    assert.equal(plain.retryAfter, 1);

    refused = 0;
    const started = Date.now();
    const retrying = new EpimemClient({ baseUrl: proxy.url, apiKey: ADMIN_KEY, retry: { retries: 2 } });
    const sessions = await retrying.listSessions(group);
    assert.deepEqual(sessions.map((s) => s.session_id), ["s"]); // the real server's answer
    assert.ok(Date.now() - started >= 950, "waited for Retry-After");
  } finally {
    await proxy.close();
  }
});

test("an answer not in epimem's shape (a proxy's 502 page) is still an EpimemError with its status", async () => {
  const proxy = await listen(
    createServer((_incoming, outgoing) => {
      outgoing.writeHead(502, { "content-type": "text/html" });
      outgoing.end("<html><body>Bad Gateway</body></html>");
    }),
  );
  try {
    const error = await failure(new EpimemClient({ baseUrl: proxy.url, retry: true }).search(group, "dog"));
    assert.equal(error.status, 502);
    assert.equal(error.code, "http_502");
    assert.match(error.message, /Bad Gateway/);
  } finally {
    await proxy.close();
  }
});

test("a fetch of one's own is used for every call", async () => {
  const seen: string[] = [];
  const traced = client({
    fetch: (input, init) => {
      seen.push(`${init?.method} ${new URL(String(input)).pathname}`);
      return fetch(input, init);
    },
  });
  await traced.listSessions(group);
  assert.deepEqual(seen, [`GET /v1/groups/${group}/sessions`]);
});

async function listen(server: Server): Promise<{ url: string; close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

async function closedPort(): Promise<number> {
  const server = await listen(createServer());
  const port = Number(new URL(server.url).port);
  await server.close();
  return port;
}
