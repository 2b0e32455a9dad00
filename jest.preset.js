// Shared jest configuration: ESM TypeScript through @swc/jest.
// Run jest with NODE_OPTIONS=--experimental-vm-modules (every package's `test` script does).
import path from "node:path";

const here = path.dirname(new URL(import.meta.url).pathname);

/**
 * @param {string} rootDir the package directory
 * @param {{ database?: boolean }} [options] database: the package's tests use PostgreSQL/Redis
 */
export function jestConfig(rootDir, options = {}) {
  return {
    rootDir,
    testEnvironment: "node",
    extensionsToTreatAsEsm: [".ts"],
    transform: {
      "^.+\\.ts$": [
        "@swc/jest",
        {
          jsc: { parser: { syntax: "typescript" }, target: "es2022" },
          module: { type: "es6" },
        },
      ],
    },
    moduleNameMapper: { "^(\\.{1,2}/.*)\\.js$": "$1" },
    testMatch: ["<rootDir>/src/**/*.test.ts", "<rootDir>/test/**/*.test.ts"],
    testTimeout: 60_000,
    // Every file closes its own clients in afterAll; forceExit keeps a stray timer of a client
    // library from holding CI open.
    forceExit: true,
    ...(options.database
      ? {
          globalSetup: path.join(here, "packages/db/test-support/global-setup.mjs"),
          globalTeardown: path.join(here, "packages/db/test-support/global-teardown.mjs"),
        }
      : {}),
  };
}
