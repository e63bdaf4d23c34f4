// The keys of the server that `npm test` starts (test/run.ts writes them to its EPIMEM_API_KEYS_FILE).
export const KEYS = {
  adminAll: { key: "ts-admin-all-0123456789", groups: ["*"], role: "admin" },
  writeA: { key: "ts-write-a-0123456789ab", groups: ["ts-keys-a"], role: "write" },
  readA: { key: "ts-read-a-0123456789abc", groups: ["ts-keys-a"], role: "read" },
  adminB: { key: "ts-admin-b-0123456789ab", groups: ["ts-keys-b"], role: "admin" },
} as const;

/** Whether the tests' server is the one `npm test` started with these keys (not one from EPIMEM_URL). */
export const OWN_KEYS = process.env.EPIMEM_TEST_KEYS === "1";
