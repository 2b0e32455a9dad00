// cluster-key-slot (the hash-slot function ioredis itself uses) ships no type declarations.
declare module "cluster-key-slot" {
  /** The Redis Cluster hash slot (0–16383) of a key, honouring `{hash tags}`. */
  function calculateSlot(key: string | Buffer): number;
  export = calculateSlot;
}
