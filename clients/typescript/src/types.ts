// Names for the generated types (src/schema.ts): the HTTP API's own shapes and field names.
import type { components, operations } from "./schema.js";

type Schemas = components["schemas"];

export type Message = Schemas["Message"];
/** A message to add: `id` and `content` are required; `role` (user), `timestamp` (now), the rest optional. */
export type MessageIn = Schemas["Message"];
export type Episode = Schemas["Episode"];
export type AddReceipt = Schemas["AddReceipt"];
export type EpisodeOut = Schemas["EpisodeOut"];
export type HistoryOut = Schemas["HistoryOut"];
export type SearchQuery = Schemas["SearchQuery"];
export type SearchHit = Schemas["SearchHit"];
export type ScoreComponents = Schemas["ScoreComponents"];
export type ContextQuery = Schemas["ContextQuery"];
export type ContextResult = Schemas["ContextResult"];
export type Citation = Schemas["Citation"];
export type TimelinePage = Schemas["TimelinePage"];
export type SessionInfo = Schemas["SessionInfo"];
export type SessionInfoIn = Schemas["SessionInfoIn"];
export type GroupConfiguration = Schemas["GroupConfiguration"];
export type GroupConfigurationIn = Schemas["GroupConfigurationIn"];
export type SummariesIn = Schemas["SummariesIn"];
export type DeletionReceipt = Schemas["DeletionReceipt"];
export type ImportReceipt = Schemas["ImportReceipt"];
/** The one error body of every non-2xx answer. */
export type ErrorBody = Schemas["ErrorBody"];
/** The query parameters of `GET /v1/groups/{group_id}/timeline`: `session_id`, `start`, `end`, `limit`, `cursor`,
 * `order`. */
export type TimelineParams = NonNullable<operations["timeline_v1_groups__group_id__timeline_get"]["parameters"]["query"]>;
