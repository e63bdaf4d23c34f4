export { EpimemClient, pathSegment } from "./client.js";
export type { EpimemClientOptions, RetryOptions } from "./client.js";
export { EpimemError, INVALID_RESPONSE, NETWORK_ERROR, TIMEOUT } from "./errors.js";
export type * from "./types.js";
export type { components, operations, paths } from "./schema.js";
