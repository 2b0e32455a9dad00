export {
  type Batched,
  type BatchLimits,
  type BatchOptions,
  createBatcher,
  DEFAULT_BATCH_LIMITS,
} from "./batch.js";
