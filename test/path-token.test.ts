import { describe, expect, it } from "vitest";
import { pathToken, requestToken, routingPath } from "../src/http/path-token";

describe("the token-in-path form", () => {
  it("routes /e/<engine>/t/<token>/... as /e/<engine>/... and reads the token back", () => {
    const url = "http://x.test/e/eng-1/t/rx_client_abc/claim_episode";
    expect(routingPath(new Request(url))).toBe("/e/eng-1/claim_episode");
    expect(pathToken(url)).toBe("rx_client_abc");
    expect(routingPath(new Request("http://x.test/e/eng-1/t/tok/v1/chat/completions?stream=1"))).toBe("/e/eng-1/v1/chat/completions");
  });

  it("leaves other paths alone and never takes a token from the query string", () => {
    expect(routingPath(new Request("http://x.test/e/eng-1/claim_episode"))).toBe("/e/eng-1/claim_episode");
    expect(pathToken("http://x.test/e/eng-1/claim_episode")).toBeNull();
    expect(pathToken("http://x.test/admin/engines?next=/e/a/t/stolen/x")).toBeNull();
    expect(pathToken("http://x.test/e/eng-1/claim_episode?x=/e/a/t/stolen/y")).toBeNull();
  });

  it("prefers the bearer header to the path", () => {
    expect(requestToken("Bearer from-header", "http://x.test/e/a/t/from-path/get_engine_status")).toBe("from-header");
    expect(requestToken(undefined, "http://x.test/e/a/t/from-path/get_engine_status")).toBe("from-path");
    expect(requestToken("Basic abc", "http://x.test/e/a/get_engine_status")).toBeNull();
  });
});
