/**
 * The slice of the browser's DOM that the dashboard uses, typed here because the repo's
 * TypeScript program is a Worker's (no DOM lib; adding it would clash with the Workers types).
 * The page passes the real `window` in; these interfaces are what the code may touch.
 */

export interface DomEvent {
  preventDefault(): void;
}

/** A keydown's key: "ArrowDown", "Enter", "Escape", "a", ... */
export interface DomKeyEvent extends DomEvent {
  readonly key: string;
}

export interface DomElement {
  id: string;
  className: string;
  textContent: string | null;
  hidden: boolean;
  readonly childElementCount: number;
  /** The width of the content, overflow included, and the width shown: more content than room when the first is larger. */
  readonly scrollWidth: number;
  readonly clientWidth: number;
  setAttribute(name: string, value: string): void;
  getAttribute(name: string): string | null;
  removeAttribute(name: string): void;
  append(...nodes: Array<DomElement | string>): void;
  replaceChildren(...nodes: Array<DomElement | string>): void;
  addEventListener(type: string, listener: (ev: DomEvent) => void): void;
  querySelector(selectors: string): DomElement | null;
  scrollIntoView(options?: { block?: "start" | "center" | "end" | "nearest" }): void;
}

export interface DomInput extends DomElement {
  value: string;
  focus(): void;
  blur(): void;
}

export interface DomDocument {
  title: string;
  getElementById(id: string): DomElement | null;
  createElement(tag: string): DomElement;
  createElementNS(namespace: string, tag: string): DomElement;
}

export interface DomStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export interface FetchAnswer {
  ok: boolean;
  status: number;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
}

export interface BrowserWindow {
  document: DomDocument;
  localStorage: DomStorage;
  location: { href: string; origin: string; pathname: string; search: string };
  history: { replaceState(data: null, unused: string, url: string): void };
  fetch(url: string, init?: { method?: string; headers?: Record<string, string>; body?: string; cache?: "default" | "no-store" }): Promise<FetchAnswer>;
  setTimeout(handler: () => void, ms: number): number;
  clearTimeout(id: number): void;
}

export type AttrValue = string | number | boolean | null | undefined;
export type Attrs = Record<string, AttrValue | ((ev: DomEvent) => void)>;
export type Child = DomElement | string | null | undefined | false;

/** Element builders: `h("div", {class: "x"}, child...)` for HTML, `s(...)` for SVG. */
export function domModule(win: BrowserWindow) {
  const doc = win.document;

  function fill(el: DomElement, attrs: Attrs, children: Child[]): DomElement {
    for (const [name, value] of Object.entries(attrs)) {
      if (typeof value === "function") el.addEventListener(name.replace(/^on/, ""), value);
      // false/null/undefined mean "no attribute", so callers can write {hidden: cond}.
      else if (value !== false && value !== null && value !== undefined) el.setAttribute(name, value === true ? "" : String(value));
    }
    for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
    return el;
  }

  return {
    h: (tag: string, attrs: Attrs = {}, ...children: Child[]): DomElement => fill(doc.createElement(tag), attrs, children),
    s: (tag: string, attrs: Attrs = {}, ...children: Child[]): DomElement =>
      fill(doc.createElementNS("http://www.w3.org/2000/svg", tag), attrs, children),
    /** The element with this id; the page's HTML shell defines every id the code asks for. */
    byId: (id: string): DomElement => {
      const el = doc.getElementById(id);
      if (!el) throw new Error(`the page has no #${id}`);
      return el;
    },
  };
}
export type Dom = ReturnType<typeof domModule>;
