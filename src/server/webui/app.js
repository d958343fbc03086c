// The chat page of `deepinfer serve`: talks to the server's own OpenAI API
// (/v1/models, /v1/chat/completions with SSE streaming) and keeps conversations in
// localStorage. Model text only ever reaches the page through textContent and
// createElement: nothing it says is parsed as HTML.
'use strict';

const KEYS = { chats: 'deepinfer.chats', settings: 'deepinfer.settings', apiKey: 'deepinfer.apiKey' };
const DEFAULTS = { system: '', temperature: 0.7, top_p: 0.95, max_tokens: 1024, thinking: false,
                   effort: '', tools: '', model: '' };

const $ = (id) => document.getElementById(id);

// One element with a class and text, set as textContent (never parsed as HTML).
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// ---------------------------------------------------------------- storage

function readJson(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v === null ? fallback : v;
  } catch (e) {
    return fallback;
  }
}

function writeJson(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (e) {
    showError('Could not save to local storage: ' + e.message);
  }
}

// Conversations from storage, rebuilt field by field: the store may hold anything (an
// older page, another tool, a hand edit), and only strings and numbers go on.
function loadChats() {
  const list = readJson(KEYS.chats, []);
  if (!Array.isArray(list)) return [];
  const str = (v) => (typeof v === 'string' ? v : '');
  const message = (m) => {
    const out = { role: m.role, content: str(m.content) };
    if (m.role === 'user') return out;
    out.reasoning = str(m.reasoning);
    out.tool_calls = (Array.isArray(m.tool_calls) ? m.tool_calls : []).filter((c) => c && typeof c === 'object')
      .map((c) => ({ id: str(c.id), name: str(c.name), arguments: str(c.arguments) }));
    out.done = m.done === true;
    out.stopped = m.stopped === true;
    if (m.error) out.error = str(m.error);
    out.stats = {};
    for (const [k, v] of Object.entries(m.stats && typeof m.stats === 'object' ? m.stats : {}))
      if (typeof v === 'number' || (k === 'finish' && typeof v === 'string')) out.stats[k] = v;
    return out;
  };
  return list.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages))
    .map((c) => ({ id: c.id, title: str(c.title) || 'Untitled', updated: Number(c.updated) || 0,
                   messages: c.messages.filter((m) => m && (m.role === 'user' || m.role === 'assistant')).map(message) }));
}

// Stored settings over the defaults, each only if of a usable type.
function loadSettings() {
  const stored = readJson(KEYS.settings, {});
  const s = Object.assign({}, DEFAULTS);
  if (!stored || typeof stored !== 'object') return s;
  for (const k of Object.keys(DEFAULTS)) {
    const v = stored[k];
    if (typeof DEFAULTS[k] === 'boolean' ? typeof v === 'boolean' : typeof v === 'string' || typeof v === 'number')
      s[k] = v;
  }
  return s;
}

const state = {
  chats: loadChats(),
  currentId: null,
  settings: loadSettings(),
  apiKey: localStorage.getItem(KEYS.apiKey) || '',
  streaming: null,  // { chat, msg, controller } while a reply streams
  models: [],
};

// The element showing each message (kept out of the stored objects).
const nodes = new WeakMap();

function saveSettings() { writeJson(KEYS.settings, state.settings); }
function currentChat() { return state.chats.find((c) => c.id === state.currentId) || null; }

function newId() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (state.apiKey) h.Authorization = 'Bearer ' + state.apiKey;
  return h;
}

// The server's JSON error message (OpenAI shape), else the status line.
async function errorOf(res) {
  let text = '';
  try { text = await res.text(); } catch (e) { /* body lost: the status says enough */ }
  let message = '';
  try {
    const j = JSON.parse(text);
    const e = j && j.error;
    message = typeof e === 'string' ? e : (e && typeof e.message === 'string' ? e.message : '');
  } catch (e) {
    message = text.slice(0, 300);
  }
  return new ApiError('HTTP ' + res.status + (res.statusText ? ' ' + res.statusText : '') +
                      (message ? ': ' + message : ''), res.status);
}

// Calls onData with each parsed `data:` payload of a server-sent event stream until [DONE].
async function readSse(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '', raw = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    // Line ends become \n; a CR at the end of a piece waits, as it may be half of a CRLF.
    raw += decoder.decode(value, { stream: true });
    const upto = raw.endsWith('\r') ? raw.length - 1 : raw.length;
    buf += raw.slice(0, upto).replace(/\r\n?/g, '\n');
    raw = raw.slice(upto);
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;  // comments (keep-alives) and named events without data
      if (data === '[DONE]') return;
      onData(JSON.parse(data));
    }
  }
  throw new ApiError('the stream ended before [DONE]', 0);
}

// ---------------------------------------------------------------- Markdown (a safe subset)

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function safeUrl(url) {
  return /^(https?:|mailto:)/i.test(url) ? url : null;
}

// Inline spans: code, bold, italic, strike, links (http, https, mailto only), bare URLs,
// backslash escapes. Everything else is text.
const INLINE = new RegExp([
  '(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)',                      // 1,2 code
  '\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*',                          // 3 bold
  '(?<![\\w])__(?=\\S)([\\s\\S]*?\\S)__(?![\\w])',                // 4 bold (not inside words)
  '~~(?=\\S)([\\s\\S]*?\\S)~~',                                  // 5 strike
  '\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*',                        // 6 italic
  '(?<![\\w])_(?=[^\\s_])([\\s\\S]*?[^\\s_])_(?![\\w])',         // 7 italic
  '!?\\[([^\\]]*)\\]\\(\\s*<?([^)\\s>]*)>?(?:\\s+"[^"]*")?\\s*\\)', // 8,9 link / image
  '(https?:\\/\\/[^\\s<>()]*[^\\s<>().,;:!?\'"])',              // 10 bare URL
  '\\\\([\\\\`*_{}\\[\\]()#+\\-.!~|>])',                         // 11 escape
].join('|'), 'g');

function renderInline(text, parent) {
  let last = 0;
  INLINE.lastIndex = 0;
  const matches = [];
  for (let m; (m = INLINE.exec(text));) matches.push(m);
  for (const m of matches) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    last = m.index + m[0].length;
    let node;
    if (m[1] !== undefined) node = el('code', '', m[2]);
    else if (m[3] !== undefined || m[4] !== undefined) node = wrap('strong', m[3] !== undefined ? m[3] : m[4]);
    else if (m[5] !== undefined) node = wrap('del', m[5]);
    else if (m[6] !== undefined || m[7] !== undefined) node = wrap('em', m[6] !== undefined ? m[6] : m[7]);
    else if (m[8] !== undefined) {
      const href = safeUrl(m[9]);
      const label = m[8] || m[9];
      if (href) {
        node = el('a');
        node.href = href;
        node.rel = 'noopener noreferrer';
        node.target = '_blank';
        renderInline(label, node);
      } else {
        node = document.createTextNode(m[0]);  // a link we will not follow stays visible as text
      }
    } else if (m[10] !== undefined) {
      node = el('a', '', m[10]);
      node.href = m[10];
      node.rel = 'noopener noreferrer';
      node.target = '_blank';
    } else {
      node = document.createTextNode(m[11]);
    }
    parent.append(node);
  }
  if (last < text.length) parent.append(text.slice(last));
}

function wrap(tag, inner) {
  const e = el(tag);
  renderInline(inner, e);
  return e;
}

function codeBlock(lang, code) {
  const box = el('div', 'code');
  const bar = el('div', 'code-bar');
  bar.append(el('span', 'lang', lang || 'text'));
  if (navigator.clipboard) {
    const copy = el('button', 'copy', 'Copy');
    copy.type = 'button';
    copy.addEventListener('click', () => {
      navigator.clipboard.writeText(code).then(() => { copy.textContent = 'Copied'; },
                                               () => { copy.textContent = 'Copy failed'; });
    });
    bar.append(copy);
  }
  const pre = el('pre');
  pre.append(el('code', '', code));
  box.append(bar, pre);
  return box;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function startsBlock(line, next) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
         (line.includes('|') && next !== undefined && TABLE_SEP.test(next) && next.includes('-'));
}

// Renders Markdown source into parent. An unclosed code fence (a reply still streaming)
// runs to the end.
function renderMarkdown(src, parent) {
  const lines = src.split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) { i++; continue; }
    if ((m = FENCE.exec(line))) {
      const mark = m[1];
      const body = [];
      for (i++; i < lines.length; i++) {
        const t = lines[i].trim();
        if (t.startsWith(mark[0].repeat(mark.length)) && /^[`~]+$/.test(t)) { i++; break; }
        body.push(lines[i]);
      }
      parent.append(codeBlock(m[2], body.join('\n')));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const h = el('h' + Math.min(6, m[1].length + 2));  // h3..h6: headings inside a reply stay modest
      renderInline(m[2], h);
      parent.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) { parent.append(el('hr')); i++; continue; }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim() && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ''));
      const q = el('blockquote');
      renderMarkdown(body.join('\n'), q);
      parent.append(q);
      continue;
    }
    if ((m = ITEM.exec(line))) {
      i = renderList(lines, i, m, parent);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const table = el('table');
      const head = el('tr');
      for (const c of splitRow(line)) { const th = el('th'); renderInline(c, th); head.append(th); }
      const thead = el('thead');
      thead.append(head);
      const tbody = el('tbody');
      for (i += 2; i < lines.length && lines[i].includes('|') && lines[i].trim(); i++) {
        const tr = el('tr');
        for (const c of splitRow(lines[i])) { const td = el('td'); renderInline(c, td); tr.append(td); }
        tbody.append(tr);
      }
      table.append(thead, tbody);
      const scroller = el('div', 'table');
      scroller.append(table);
      parent.append(scroller);
      continue;
    }
    // A paragraph: up to a blank line or the start of another block; single newlines are
    // kept as line breaks (chat text is written that way).
    const p = el('p');
    let first = true;
    while (i < lines.length && lines[i].trim() && (first || !startsBlock(lines[i], lines[i + 1]))) {
      if (!first) p.append(el('br'));
      renderInline(lines[i].trim(), p);
      first = false;
      i++;
    }
    parent.append(p);
  }
}

// A list starting at lines[i] (whose marker match is m); returns the index after it. Lines
// indented past the marker belong to the item above and are rendered inside it (nesting).
function renderList(lines, i, m, parent) {
  const indent = m[1].length;
  const ordered = /\d/.test(m[2]);
  const list = el(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
  while (i < lines.length) {
    const im = ITEM.exec(lines[i]);
    if (!im || im[1].length !== indent || /\d/.test(im[2]) !== ordered) break;
    const body = [lines[i].slice(im[0].length)];
    const inner = im[0].length;
    for (i++; i < lines.length; i++) {
      const l = lines[i];
      if (!l.trim()) {
        // A blank line ends the item unless the next line is indented into it.
        if (i + 1 < lines.length && /^\s*/.exec(lines[i + 1])[0].length > indent && lines[i + 1].trim()) {
          body.push('');
          continue;
        }
        break;
      }
      const lead = /^\s*/.exec(l)[0].length;
      if (lead > indent) body.push(l.slice(Math.min(lead, inner)));
      else if (!ITEM.test(l) && !startsBlock(l, lines[i + 1])) body.push(l);  // a lazy continuation
      else break;
    }
    const li = el('li');
    renderMarkdown(body.join('\n'), li);
    // A tight item's single paragraph is unwrapped, as Markdown renders it.
    if (li.childNodes.length === 1 && li.firstChild.tagName === 'P') li.replaceChildren(...li.firstChild.childNodes);
    list.append(li);
    while (i < lines.length && !lines[i].trim()) {
      const n = lines[i + 1] !== undefined ? ITEM.exec(lines[i + 1]) : null;
      if (n && n[1].length === indent) i++;
      else break;
    }
  }
  parent.append(list);
  return i;
}

// ---------------------------------------------------------------- rendering messages

function formatStats(s) {
  if (!s) return '';
  const parts = [];
  if (s.prompt_tokens !== undefined) parts.push(s.prompt_tokens + ' prompt tokens');
  if (s.completion_tokens !== undefined) parts.push(s.completion_tokens + ' generated');
  if (s.tokens_per_s) parts.push(s.tokens_per_s.toFixed(1) + ' tok/s');
  if (s.ttft !== undefined) parts.push('first token ' + s.ttft.toFixed(2) + ' s');
  if (s.seconds !== undefined) parts.push(s.seconds.toFixed(2) + ' s');
  if (s.finish) parts.push(s.finish === 'length' ? 'stopped at max tokens' : 'finish: ' + s.finish);
  return parts.join(' · ');
}

function prettyArgs(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch (e) { return args; }
}

// Builds (or rebuilds) one message's element from its stored object.
function renderMessage(msg, node) {
  node = node || el('div');
  node.className = 'msg ' + msg.role + (msg === (state.streaming && state.streaming.msg) ? ' streaming' : '');
  node.replaceChildren();
  node.append(el('div', 'role', msg.role === 'user' ? 'You' : 'Assistant'));
  if (msg.role === 'user') {
    node.append(el('div', 'text plain', msg.content));
    return node;
  }
  if (msg.reasoning) {
    const d = el('details', 'reasoning');
    // Open while the model is still thinking; afterwards collapsed unless the reader opened it.
    d.open = msg.reasoningOpen !== undefined ? msg.reasoningOpen : !msg.content && !msg.done;
    const summary = el('summary', '', msg.done || msg.content ? 'Reasoning' : 'Thinking…');
    // The reader's choice (a click on the summary, mouse or keyboard) outlives re-renders;
    // 'toggle' would also report the page's own opening.
    summary.addEventListener('click', () => { msg.reasoningOpen = !d.open; });
    d.append(summary);
    d.append(el('div', 'text plain', msg.reasoning));
    node.append(d);
  }
  if (msg.content) {
    const body = el('div', 'text md');
    renderMarkdown(msg.content, body);
    node.append(body);
  }
  for (const call of msg.tool_calls || []) {
    const box = el('div', 'tool-call');
    const head = el('div', 'tool-head');
    head.append(el('span', 'tool-label', 'Tool call'), el('code', 'tool-name', call.name || '?'));
    box.append(head);
    const pre = el('pre', 'tool-args');
    pre.append(el('code', '', prettyArgs(call.arguments || '')));
    box.append(pre);
    node.append(box);
  }
  if (!msg.done && !msg.content && !msg.reasoning && !(msg.tool_calls || []).length) {
    node.append(el('div', 'muted waiting', 'waiting for the first token…'));
  }
  if (msg.error) node.append(el('div', 'msg-error', msg.error));
  if (msg.stopped) node.append(el('div', 'stopped', 'Stopped'));
  const stats = formatStats(msg.stats);
  if (stats) node.append(el('div', 'stats', stats));
  return node;
}

function renderConversationList() {
  const ul = $('conversations');
  ul.replaceChildren();
  const sorted = state.chats.slice().sort((a, b) => b.updated - a.updated);
  for (const c of sorted) {
    const li = el('li', c.id === state.currentId ? 'active' : '');
    li.dataset.id = c.id;
    const open = el('button', 'open', c.title);
    open.type = 'button';
    open.title = c.title;
    open.addEventListener('click', () => selectChat(c.id));
    const del = el('button', 'delete', '×');
    del.type = 'button';
    del.title = 'Delete this conversation';
    del.setAttribute('aria-label', 'Delete conversation ' + c.title);
    del.addEventListener('click', () => deleteChat(c.id));
    li.append(open, del);
    ul.append(li);
  }
}

function renderMessages() {
  const box = $('messages');
  box.replaceChildren();
  const chat = currentChat();
  if (!chat || !chat.messages.length) {
    box.append(el('div', 'empty muted', 'Start a conversation: type a message below.'));
    return;
  }
  for (const m of chat.messages) {
    const node = renderMessage(m);
    nodes.set(m, node);
    box.append(node);
  }
  box.scrollTop = box.scrollHeight;
}

// Re-renders the streaming message at most once a frame, keeping the view at the bottom
// if the reader was there.
let renderPending = false;
function scheduleRender(msg) {
  if (renderPending) return;
  renderPending = true;
  requestAnimationFrame(() => {
    renderPending = false;
    const node = nodes.get(msg);
    if (!node || !node.isConnected) return;
    const box = $('messages');
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    renderMessage(msg, node);
    if (atBottom) box.scrollTop = box.scrollHeight;
  });
}

function showError(text) {
  const e = $('error');
  e.replaceChildren(el('span', '', text));
  const close = el('button', 'close', '×');
  close.type = 'button';
  close.setAttribute('aria-label', 'Dismiss');
  close.addEventListener('click', () => { e.hidden = true; });
  e.append(close);
  e.hidden = false;
}

function clearError() { $('error').hidden = true; }

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
}

// ---------------------------------------------------------------- conversations

function selectChat(id) {
  state.currentId = id;
  renderConversationList();
  renderMessages();
  $('input').focus();
}

function newChat() {
  state.currentId = null;
  renderConversationList();
  renderMessages();
  $('input').focus();
}

function deleteChat(id) {
  if (state.streaming && state.streaming.chat.id === id) state.streaming.controller.abort();
  state.chats = state.chats.filter((c) => c.id !== id);
  if (state.currentId === id) state.currentId = null;
  persist();
  renderConversationList();
  renderMessages();
}

function persist() { writeJson(KEYS.chats, state.chats); }

// The API's messages for a conversation: replies that failed before saying anything are left out.
function apiMessages(chat, upTo) {
  const out = [];
  if (String(state.settings.system).trim()) out.push({ role: 'system', content: String(state.settings.system) });
  for (const m of chat.messages.slice(0, upTo)) {
    if (m.role === 'user') out.push({ role: 'user', content: m.content });
    else if (m.content || (m.tool_calls || []).length) {
      const a = { role: 'assistant', content: m.content || '' };
      if ((m.tool_calls || []).length)
        a.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: 'function',
                                                  function: { name: c.name, arguments: c.arguments } }));
      out.push(a);
    }
  }
  return out;
}

// ---------------------------------------------------------------- sending

function requestBody(chat, upTo) {
  const s = state.settings;
  const body = { messages: apiMessages(chat, upTo), stream: true, stream_options: { include_usage: true },
                 thinking: !!s.thinking };
  if (s.model) body.model = s.model;
  if (s.temperature !== '' && s.temperature !== null) body.temperature = Number(s.temperature);
  if (s.top_p !== '' && s.top_p !== null) body.top_p = Number(s.top_p);
  if (s.max_tokens !== '' && s.max_tokens !== null) body.max_tokens = Number(s.max_tokens);
  if (s.thinking && s.effort) body.reasoning_effort = s.effort;
  if (String(s.tools).trim()) {
    let tools;
    try { tools = JSON.parse(s.tools); } catch (e) { throw new ApiError('Tools: not valid JSON (' + e.message + ')', 0); }
    if (!Array.isArray(tools)) throw new ApiError('Tools: expected a JSON array', 0);
    if (tools.length) body.tools = tools;
  }
  return body;
}

// Folds one chat.completion.chunk into the message being streamed.
function applyChunk(msg, chunk, timing) {
  if (chunk.error) throw new ApiError(chunk.error.message || JSON.stringify(chunk.error), 0);
  if (chunk.usage) {
    msg.stats.prompt_tokens = chunk.usage.prompt_tokens;
    msg.stats.completion_tokens = chunk.usage.completion_tokens;
  }
  for (const choice of chunk.choices || []) {
    if (choice.index) continue;  // n > 1 is not asked for
    const d = choice.delta || {};
    const had = msg.reasoning || msg.content || msg.tool_calls.length;
    if (d.reasoning_content) msg.reasoning += d.reasoning_content;
    if (d.content) msg.content += d.content;
    for (const tc of d.tool_calls || []) {
      const i = tc.index || 0;
      while (msg.tool_calls.length <= i) msg.tool_calls.push({ id: '', name: '', arguments: '' });
      const call = msg.tool_calls[i];
      if (tc.id) call.id = tc.id;
      if (tc.function && tc.function.name) call.name += tc.function.name;
      if (tc.function && tc.function.arguments) call.arguments += tc.function.arguments;
    }
    if (!had && (msg.reasoning || msg.content || msg.tool_calls.length)) timing.first = performance.now();
    if (choice.finish_reason) msg.stats.finish = choice.finish_reason;
  }
}

async function streamReply(chat, msg, body) {
  const controller = new AbortController();
  state.streaming = { chat, msg, controller };
  setBusy(true);
  const timing = { start: performance.now(), first: 0 };
  msg.stats = {};
  try {
    const res = await fetch('v1/chat/completions', { method: 'POST', headers: headers(),
                                                     body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) throw await errorOf(res);
    await readSse(res.body, (chunk) => {
      applyChunk(msg, chunk, timing);
      scheduleRender(msg);
    });
  } catch (e) {
    if (e.name === 'AbortError') msg.stopped = true;
    else if (e.status === 401) {
      msg.error = e.message;
      askKey('The server rejected the request: ' + e.message);
    } else if (e instanceof ApiError) msg.error = e.message;
    else if (e instanceof SyntaxError) msg.error = 'Unreadable data from the server: ' + e.message;
    else msg.error = 'Network error: ' + e.message;
  } finally {
    const end = performance.now();
    msg.done = true;
    msg.stats.seconds = (end - timing.start) / 1000;
    if (timing.first) {
      msg.stats.ttft = (timing.first - timing.start) / 1000;
      // Decode speed: the tokens after the first over the time after it.
      const n = msg.stats.completion_tokens;
      if (n > 1 && end > timing.first) msg.stats.tokens_per_s = (n - 1) / ((end - timing.first) / 1000);
    }
    state.streaming = null;
    chat.updated = Date.now();
    persist();
    setBusy(false);
    const node = nodes.get(msg);
    if (node && node.isConnected) renderMessage(msg, node);
  }
}

async function send() {
  const input = $('input');
  const text = input.value;
  if (!text.trim() || state.streaming) return;
  clearError();
  let chat = currentChat();
  if (!chat) {
    chat = { id: newId(), title: text.trim().replace(/\s+/g, ' ').slice(0, 60), updated: Date.now(), messages: [] };
    state.chats.push(chat);
    state.currentId = chat.id;
  }
  chat.messages.push({ role: 'user', content: text });
  let body;
  try {
    body = requestBody(chat, chat.messages.length);
  } catch (e) {
    chat.messages.pop();
    if (!chat.messages.length) state.chats = state.chats.filter((c) => c !== chat);
    showError(e.message);
    return;
  }
  const msg = { role: 'assistant', content: '', reasoning: '', tool_calls: [], done: false };
  chat.messages.push(msg);
  chat.updated = Date.now();
  input.value = '';
  persist();
  renderConversationList();
  renderMessages();
  await streamReply(chat, msg, body);
}

// ---------------------------------------------------------------- models and the API key

async function loadModels() {
  const status = $('server-status');
  status.textContent = 'connecting…';
  let res;
  try {
    res = await fetch('v1/models', { headers: headers() });
  } catch (e) {
    status.textContent = 'server unreachable';
    showError('Cannot reach the server: ' + e.message);
    return;
  }
  if (res.status === 401) {
    status.textContent = 'API key needed';
    const err = await errorOf(res);
    askKey(state.apiKey ? 'The key was rejected: ' + err.message : '');
    return;
  }
  if (res.status === 503) {  // the model is still loading
    status.textContent = 'model loading…';
    setTimeout(loadModels, 2000);
    return;
  }
  if (!res.ok) {
    status.textContent = '';
    showError((await errorOf(res)).message);
    return;
  }
  let list;
  try {
    list = await res.json();
  } catch (e) {
    showError('Unreadable model list from the server: ' + e.message);
    return;
  }
  state.models = (list.data || []).map((m) => m.id);
  const select = $('model');
  select.replaceChildren(...state.models.map((id) => { const o = el('option', '', id); o.value = id; return o; }));
  if (!state.models.includes(state.settings.model)) state.settings.model = state.models[0] || '';
  select.value = state.settings.model;
  const info = (list.data || []).find((m) => m.id === state.settings.model);
  status.textContent = info && info.max_model_len ? 'context ' + info.max_model_len + ' tokens' : '';
  clearError();
}

function askKey(problem) {
  const p = $('key-problem');
  p.textContent = problem || '';
  p.hidden = !problem;
  $('key-input').value = '';
  const d = $('key-dialog');
  if (!d.open) d.showModal();
  $('key-input').focus();
}

function updateKeyState() {
  $('key-state').textContent = state.apiKey ? 'An API key is stored in this browser.' : 'No API key stored.';
  $('key-forget').disabled = !state.apiKey;
}

// ---------------------------------------------------------------- settings

const FIELDS = [
  ['set-system', 'system', 'value'], ['set-temperature', 'temperature', 'value'], ['set-top-p', 'top_p', 'value'],
  ['set-max-tokens', 'max_tokens', 'value'], ['set-thinking', 'thinking', 'checked'], ['set-effort', 'effort', 'value'],
  ['set-tools', 'tools', 'value'],
];

function bindSettings() {
  for (const [id, key, prop] of FIELDS) {
    const input = $(id);
    input[prop] = state.settings[key];
    input.addEventListener('change', () => {
      state.settings[key] = input[prop];
      saveSettings();
      $('set-effort').disabled = !state.settings.thinking;
    });
  }
  $('set-effort').disabled = !state.settings.thinking;
  $('model').addEventListener('change', () => {
    state.settings.model = $('model').value;
    saveSettings();
  });
  $('settings-toggle').addEventListener('click', () => {
    const s = $('settings');
    s.hidden = !s.hidden;
    $('settings-toggle').setAttribute('aria-expanded', String(!s.hidden));
  });
}

// ---------------------------------------------------------------- start

function init() {
  bindSettings();
  updateKeyState();
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('stop').addEventListener('click', () => { if (state.streaming) state.streaming.controller.abort(); });
  $('new-chat').addEventListener('click', newChat);
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.apiKey = $('key-input').value.trim();
    if (state.apiKey) localStorage.setItem(KEYS.apiKey, state.apiKey);
    else localStorage.removeItem(KEYS.apiKey);
    $('key-dialog').close();
    updateKeyState();
    loadModels();
  });
  $('key-cancel').addEventListener('click', () => $('key-dialog').close());
  $('key-change').addEventListener('click', () => askKey(''));
  $('key-forget').addEventListener('click', () => {
    state.apiKey = '';
    localStorage.removeItem(KEYS.apiKey);
    updateKeyState();
  });
  // A conversation left mid-reply by a reload is finished as it stands.
  for (const c of state.chats)
    for (const m of c.messages)
      if (m.role === 'assistant' && !m.done) { m.done = true; m.stopped = true; }
  const recent = state.chats.slice().sort((a, b) => b.updated - a.updated)[0];
  state.currentId = recent ? recent.id : null;
  renderConversationList();
  renderMessages();
  loadModels();
}

init();
