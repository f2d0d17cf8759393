/**
 * Values made by a promise, by key, kept as the value once it settles, so a hot path need not
 * await a promise per use (the imported HMAC keys, the engines' gateway secrets); a rejection is
 * forgotten (the next use makes it again). At most 1,000 kept: past that the map starts over.
 */
export function settledCache<T>(): (key: string, make: (key: string) => Promise<T>) => T | Promise<T> {
  const kept = new Map<string, T | Promise<T>>();
  return (key, make) => {
    const known = kept.get(key);
    if (known !== undefined) return known;
    if (kept.size > 1000) kept.clear();
    const making = make(key);
    kept.set(key, making);
    void making.then((ready) => kept.get(key) === making && kept.set(key, ready), () => kept.delete(key));
    return making;
  };
}
