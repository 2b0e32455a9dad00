/**
 * A periodic task whose runs never overlap: `tick()` runs it now, after any run in progress (a
 * manual tick while one runs waits for it and then runs); `start()` runs it every `intervalMs`
 * after the previous run ended, on an unref'd timer; `stop()` stops the timer and waits for a run
 * in progress. The outbox relay, the recovery driver and the reminder scheduler are each one of these.
 */
export interface Ticker {
  tick(): Promise<number>;
  start(): void;
  stop(): Promise<void>;
}

export function createTicker(intervalMs: number, run: () => Promise<number>): Ticker {
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  let current: Promise<number> | undefined;

  function tick(): Promise<number> {
    const next = (current ?? Promise.resolve(0)).then(run, run);
    current = next;
    return next;
  }

  function schedule(): void {
    if (!running) return;
    timer = setTimeout(() => {
      void tick().finally(schedule);
    }, intervalMs);
    timer.unref();
  }

  return {
    tick,
    start(): void {
      if (running) return;
      running = true;
      schedule();
    },
    async stop(): Promise<void> {
      running = false;
      if (timer) clearTimeout(timer);
      timer = undefined;
      await current?.catch(() => {});
    },
  };
}
