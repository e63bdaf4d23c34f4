// API keys (the server that `npm test` starts has the keys of test/keys.ts): 401 without or with an unknown key,
// 403 for another group or too small a role, in epimem's one error shape.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { EpimemError } from "epimem-client";
import { CHAT, client } from "./helpers.js";
import { KEYS, OWN_KEYS } from "./keys.js";

const GROUP_A = "ts-keys-a";

async function refused(promise: Promise<unknown>, status: number, code: string): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof EpimemError);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    assert.ok(error.message.length > 0);
    return true;
  });
}

describe("keys", { skip: OWN_KEYS ? false : "EPIMEM_URL is set: the server's keys are not the tests' own" }, () => {
  after(async () => {
    await client({ apiKey: KEYS.adminAll.key }).deleteGroup(GROUP_A);
  });

  test("no key or an unknown key: 401 unauthorized", async () => {
    await refused(client({ apiKey: undefined }).listSessions(GROUP_A), 401, "unauthorized");
    await refused(client({ apiKey: "not-a-key-of-this-server" }).search(GROUP_A, "dog"), 401, "unauthorized");
  });

  test("a key of another group: 403 forbidden", async () => {
    await refused(client({ apiKey: KEYS.adminB.key }).history(GROUP_A, "s"), 403, "forbidden");
    await refused(client({ apiKey: KEYS.writeA.key }).listSessions("ts-keys-b"), 403, "forbidden");
  });

  test("each role does what it may and no more", async () => {
    const writer = client({ apiKey: KEYS.writeA.key });
    const reader = client({ apiKey: KEYS.readA.key });
    assert.deepEqual((await writer.addMessages(GROUP_A, "s", CHAT)).accepted, ["m1", "m2"]);
    await refused(reader.addMessages(GROUP_A, "s", CHAT), 403, "forbidden");
    assert.equal((await reader.history(GROUP_A, "s")).messages.length, 2);
    await refused(writer.deleteSession(GROUP_A, "s"), 403, "forbidden"); // deletion needs admin
    await refused(writer.exportGroup(GROUP_A).next(), 403, "forbidden"); // so does export
    assert.equal((await reader.history(GROUP_A, "s")).messages.length, 2);
  });
});
