import { methodNotAllowed } from "@botdir/service-kit";
import type { Router } from "express";

/** JSON 405 with an Allow header for every other method on `path`. Register after the handlers. */
export function allowOnly(router: Router, path: string, methods: string[]): void {
  const allow = methods.includes("GET") && !methods.includes("HEAD") ? [...methods, "HEAD"] : methods;
  router.all(path, methodNotAllowed(allow));
}
