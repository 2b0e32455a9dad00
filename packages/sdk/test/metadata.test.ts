/**
 * The SDKs' published metadata names no address we do not own: no `repository`, `homepage` or
 * `bugs` in packages/sdk/package.json, no `[project.urls]` or other URL in
 * packages/sdk-python/pyproject.toml. The only addresses the package files may carry are the
 * reserved example names (RFC 2606) and the Standard Webhooks specification they implement.
 */
import { readFileSync } from "node:fs";
import path from "node:path";

const sdkDir = path.resolve(import.meta.dirname, "..");
const pythonDir = path.resolve(sdkDir, "..", "sdk-python");
const ALLOWED_HOSTS = [/\.example$/, /^example\.(com|org|net)$/, /^www\.standardwebhooks\.com$/];

/** Every http(s) or git URL in `text`, and the ones whose host is not allowed. */
function foreignUrls(text: string): string[] {
  const urls = text.match(/\b(?:git\+)?(?:https?|git|ssh):\/\/[^\s"'<>)\]]+/g) ?? [];
  return urls.filter((url) => {
    const host = new URL(url.replace(/^git\+/, "")).hostname;
    return !ALLOWED_HOSTS.some((allowed) => allowed.test(host));
  });
}

describe("the SDKs' package metadata", () => {
  it("when package.json is read, then it has no repository, homepage or bugs and no foreign URL", () => {
    const raw = readFileSync(path.join(sdkDir, "package.json"), "utf8");
    const pkg = JSON.parse(raw) as Record<string, unknown>;
    expect(["repository", "homepage", "bugs", "funding"].filter((key) => key in pkg)).toEqual([]);
    expect(foreignUrls(raw)).toEqual([]);
  });

  it("when pyproject.toml is read, then it has no [project.urls] and no foreign URL", () => {
    const raw = readFileSync(path.join(pythonDir, "pyproject.toml"), "utf8");
    expect(raw).not.toMatch(/^\[project\.urls\]/m);
    expect(raw).not.toMatch(/^(homepage|repository|documentation)\s*=/im);
    expect(foreignUrls(raw)).toEqual([]);
  });

  it("when a foreign URL is in the text, then the check finds it", () => {
    expect(foreignUrls('"url": "git+https://github.com/botdir/botdir.git"')).toEqual([
      "git+https://github.com/botdir/botdir.git",
    ]);
    expect(foreignUrls('Homepage = "https://botdir.example/docs"')).toEqual([]);
  });
});
