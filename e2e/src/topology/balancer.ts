/**
 * The client side of the topology suite: keep-alive HTTP requests whose failures are told apart
 * (a refused connection never reached an app; a reset or closed connection lost a request the app
 * had accepted), and a round-robin balancer over an app's replicas that acts like a Kubernetes
 * Service: it polls each replica's `/readyz` and sends nothing to one that is not ready, and a
 * refused connection is retried on another replica (the request never reached an app).
 */
import http from "node:http";

export type Outcome =
  | {
      kind: "answered";
      status: number;
      headers: http.IncomingHttpHeaders;
      body: string;
      ms: number;
      replica: string;
    }
  /** ECONNREFUSED on every replica tried: the request never reached an app. */
  | { kind: "refused"; replica: string }
  /** The connection was reset or closed before the answer: `reused` = on a keep-alive connection. */
  | { kind: "reset"; code: string; reused: boolean; replica: string }
  | { kind: "timeout"; replica: string }
  | { kind: "error"; code: string; replica: string };

export interface RequestSpec {
  method: "GET" | "POST" | "PUT";
  path: string;
  headers?: Record<string, string>;
  body?: unknown;
  timeoutMs?: number;
}

const RESET_CODES = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "UND_ERR_SOCKET"]);

/** One HTTP request on `agent`; never rejects. */
export function send(agent: http.Agent, base: string, spec: RequestSpec, replica: string): Promise<Outcome> {
  const started = performance.now();
  const payload = spec.body === undefined ? undefined : JSON.stringify(spec.body);
  return new Promise((resolve) => {
    let settled = false;
    const done = (outcome: Outcome) => {
      if (settled) return;
      settled = true;
      resolve(outcome);
    };
    const req = http.request(new URL(spec.path, base), {
      method: spec.method,
      agent,
      headers: {
        ...(payload === undefined
          ? {}
          : { "content-type": "application/json", "content-length": Buffer.byteLength(payload) }),
        ...spec.headers,
      },
    });
    req.setTimeout(spec.timeoutMs ?? 10_000, () => {
      done({ kind: "timeout", replica });
      req.destroy();
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        done({
          kind: "answered",
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString(),
          ms: performance.now() - started,
          replica,
        }),
      );
      res.on("error", (error: NodeJS.ErrnoException) =>
        done({ kind: "reset", code: error.code ?? error.message, reused: req.reusedSocket, replica }),
      );
    });
    req.on("error", (error: NodeJS.ErrnoException) => {
      const code = error.code ?? error.message;
      if (code === "ECONNREFUSED") done({ kind: "refused", replica });
      // "socket hang up" (ECONNRESET from Node's client): closed before any answer arrived.
      else if (RESET_CODES.has(code)) done({ kind: "reset", code, reused: req.reusedSocket, replica });
      else done({ kind: "error", code, replica });
    });
    req.end(payload);
  });
}

export interface Replica {
  name: string;
  base: string;
  agent: http.Agent;
  ready: boolean;
}

export interface Balancer {
  /** Adds a replica (already answering) to the rotation. */
  add(name: string, base: string): Replica;
  /** Takes a replica out for good (its process is gone). */
  remove(name: string): void;
  replicas(): Replica[];
  /** Sends to the next ready replica; a refused connection is retried on the others. */
  request(spec: RequestSpec): Promise<Outcome>;
  /** Sends to one replica, ready or not. */
  requestTo(name: string, spec: RequestSpec): Promise<Outcome>;
  close(): void;
}

export function createBalancer(options: { readinessPath: string; pollMs: number }): Balancer {
  const replicas = new Map<string, Replica>();
  let next = 0;
  const probeAgent = new http.Agent({ keepAlive: false });
  const poll = setInterval(() => {
    for (const replica of replicas.values()) {
      void send(
        probeAgent,
        replica.base,
        { method: "GET", path: options.readinessPath, timeoutMs: 1_000 },
        "",
      ).then((outcome) => {
        if (replicas.get(replica.name) === replica)
          replica.ready = outcome.kind === "answered" && outcome.status === 200;
      });
    }
  }, options.pollMs);

  const ready = () => [...replicas.values()].filter((r) => r.ready);
  return {
    add(name, base) {
      const replica = {
        name,
        base,
        agent: new http.Agent({ keepAlive: true, maxSockets: 64 }),
        ready: true,
      };
      replicas.set(name, replica);
      return replica;
    },
    remove(name) {
      const replica = replicas.get(name);
      replicas.delete(name);
      replica?.agent.destroy();
    },
    replicas: () => [...replicas.values()],
    async request(spec) {
      const tried = new Set<string>();
      let last: Outcome = { kind: "refused", replica: "none" };
      // With no replica ready (all restarting at once), wait a little as a client's retry would.
      const waitUntil = Date.now() + 3_000;
      while (ready().length === 0 && Date.now() < waitUntil) await new Promise((r) => setTimeout(r, 50));
      for (;;) {
        const candidates = ready().filter((r) => !tried.has(r.name));
        if (candidates.length === 0) return last;
        const replica = candidates[next++ % candidates.length] as Replica;
        tried.add(replica.name);
        last = await send(replica.agent, replica.base, spec, replica.name);
        if (last.kind !== "refused") return last;
        // Connection refused: the Service would stop routing here until the probe says ready.
        replica.ready = false;
      }
    },
    requestTo(name, spec) {
      const replica = replicas.get(name);
      if (!replica) throw new Error(`no replica ${name}`);
      return send(replica.agent, replica.base, spec, replica.name);
    },
    close() {
      clearInterval(poll);
      for (const replica of replicas.values()) replica.agent.destroy();
      probeAgent.destroy();
    },
  };
}
