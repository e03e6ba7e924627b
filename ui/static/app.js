// meshagent status page: polls the node's local API over its WebSocket
// (JSON-RPC 2.0, seed 001's initialize first) and redraws. Every value
// from the node is put into the page as text, never as markup.
"use strict";

(() => {
  const POLL_MS = 1000;
  const SVG = "http://www.w3.org/2000/svg";
  const clientId = "meshagent-ui-" + Array.from(crypto.getRandomValues(new Uint8Array(6)), (b) => b.toString(16).padStart(2, "0")).join("");

  let ws = null;
  let nextId = 1;
  const pending = new Map(); // request id -> {resolve, reject}
  let timer = null;
  let backoff = 500;

  const $ = (id) => document.getElementById(id);

  function setState(kind, text) {
    const el = $("conn-state");
    el.className = "state " + kind;
    el.textContent = text;
  }

  function call(method, params) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) {
        reject(new Error("not connected"));
        return;
      }
      const id = nextId++;
      pending.set(id, { resolve, reject });
      const msg = { jsonrpc: "2.0", id, method };
      if (params !== undefined) msg.params = params;
      ws.send(JSON.stringify(msg));
    });
  }

  function onMessage(ev) {
    let msg;
    try {
      msg = JSON.parse(ev.data);
    } catch (_) {
      return;
    }
    for (const m of Array.isArray(msg) ? msg : [msg]) {
      const p = m && pending.get(m.id);
      if (!p) continue; // a notification, or an answer to a request of a closed socket
      pending.delete(m.id);
      if (m.error) {
        const err = new Error(m.error.message || "error");
        err.code = m.error.code;
        p.reject(err);
      } else {
        p.resolve(m.result);
      }
    }
  }

  function connect() {
    setState("connecting", "connecting…");
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const sock = new WebSocket(proto + location.host + "/");
    ws = sock;
    sock.onmessage = onMessage;
    sock.onopen = () => {
      call("initialize", { clientId, clientInfo: { name: "meshagent-ui", version: "1" } })
        .then(() => {
          backoff = 500;
          setState("live", "live");
          poll();
        })
        .catch((e) => {
          setState("down", "refused: " + e.message);
          sock.close();
        });
    };
    sock.onclose = () => {
      if (ws !== sock) return;
      ws = null;
      clearTimeout(timer);
      for (const p of pending.values()) p.reject(new Error("connection closed"));
      pending.clear();
      setState("down", "disconnected; retrying");
      timer = setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 5000);
    };
  }

  // optional: a method the node does not serve (no store, an older node)
  // shows as absent rather than failing the whole refresh.
  const optional = (p) => p.catch((e) => ({ missing: e }));

  async function poll() {
    try {
      const [status, conns, calls, dead, tasks] = await Promise.all([
        call("mesh.status"),
        optional(call("mesh.connections")),
        optional(call("mesh.recentCalls")),
        optional(call("bus.deadLetters", { limit: 20 })),
        optional(call("mesh.tasks", { state: "ESCALATED" })),
      ]);
      render(status, conns, calls, dead);
      renderEscalated(tasks);
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (ws) setState("down", "error: " + e.message);
    }
    if (ws) timer = setTimeout(poll, POLL_MS);
  }

  // ---- rendering helpers ----

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function fillList(ul, items, empty) {
    ul.replaceChildren(...(items.length ? items.map((t) => el("li", t)) : [el("li", empty, "none")]));
  }

  function fillTable(table, rows, empty) {
    const tbody = table.tBodies[0];
    if (!rows.length) {
      const td = el("td", empty, "none");
      td.colSpan = table.tHead.rows[0].cells.length;
      const tr = el("tr");
      tr.append(td);
      tbody.replaceChildren(tr);
      return;
    }
    tbody.replaceChildren(...rows.map((cells) => {
      const tr = el("tr");
      for (const c of cells) tr.append(c instanceof Node ? wrapCell(c) : el("td", c));
      return tr;
    }));
  }

  function wrapCell(node) {
    if (node.tagName === "TD") return node;
    const td = el("td");
    td.append(node);
    return td;
  }

  const short = (id) => (id && id.length > 16 ? id.slice(0, 8) + "…" + id.slice(-6) : id || "");
  const time = (t) => (t ? new Date(t).toLocaleTimeString() : "");

  // kindOf tells how each peer is connected: direct wins over relayed
  // when a peer has both connections.
  function kindsOf(conns) {
    const kinds = new Map();
    for (const c of conns) {
      const k = c.relayed ? "relayed" : "direct";
      if (kinds.get(c.agentId) !== "direct") kinds.set(c.agentId, k);
    }
    return kinds;
  }

  function render(status, connsRes, callsRes, deadRes) {
    const conns = Array.isArray(connsRes) ? connsRes : [];
    const kinds = kindsOf(conns);
    const addrOf = new Map();
    for (const c of conns) if (!addrOf.has(c.agentId) || !c.relayed) addrOf.set(c.agentId, c.remoteAddr);

    $("agent-id").textContent = status.agentId;
    $("public-key").textContent = status.publicKey || "–";
    $("log-level").textContent = status.logLevel || "–";
    fillList($("addrs"), status.addrs || [], "not listening");

    const peers = (status.peers || []).map((p) => {
      let kind = kinds.get(p.agentId);
      if (!kind) kind = "known";
      return { ...p, kind };
    });
    // Connected peers the status does not list yet (hello pending).
    for (const [id, kind] of kinds) {
      if (!peers.some((p) => p.agentId === id)) peers.push({ agentId: id, kind, capabilities: [] });
    }
    peers.sort((a, b) => (a.kind === "known") - (b.kind === "known") || a.agentId.localeCompare(b.agentId));
    const connected = peers.filter((p) => p.kind !== "known").length;
    $("peer-count").textContent = connected;
    drawGraph(status, peers, connected);
    fillTable($("peer-table"), peers.map((p) => [
      el("code", short(p.agentId)),
      p.name || "",
      el("span", p.kind === "known" ? "not connected" : p.kind, "kind-" + p.kind),
      el("code", addrOf.get(p.agentId) || ""),
      p.latencyMs ? p.latencyMs.toFixed(1) + " ms" : "",
      p.status || "",
    ]), "no peers yet");

    fillList($("caps-served"), status.capabilities || [], "none");
    const providers = new Map();
    for (const p of peers) {
      for (const c of p.capabilities || []) {
        if (!providers.has(c.name)) providers.set(c.name, []);
        providers.get(c.name).push(p.name || short(p.agentId));
      }
    }
    fillTable($("caps-discovered"), [...providers.keys()].sort().map((name) => [name, providers.get(name).join(", ")]), "none discovered yet");

    $("bus-clients").textContent = status.busClients;
    $("bus-subs").textContent = status.busSubscriptions;
    fillList($("topic-list"), status.topics || [], "none");

    if (Array.isArray(deadRes)) {
      $("dl-count").textContent = deadRes.length;
      fillTable($("dead-letters"), deadRes.map((d) => [time(d.deadAt || d.time), d.topic, short(d.to), d.reason || d.lastError || ""]), "none");
    } else {
      $("dl-count").textContent = "–";
      fillTable($("dead-letters"), [], "not kept by this node (" + deadRes.missing.message + ")");
    }

    const calls = Array.isArray(callsRes) ? callsRes : [];
    fillTable($("call-table"), calls.map((c) => [
      time(c.at),
      c.direction === "sent" ? "→ sent" : "← served",
      c.capability,
      el("code", short(c.agentId)),
      el("span", c.outcome, c.outcome === "success" ? "ok" : "err"),
      c.durationMs.toFixed(1) + " ms",
    ]), Array.isArray(callsRes) ? "no calls yet" : "not available");
  }

  // renderEscalated lists the tasks this node serves that await the
  // operator's decision, each with approve and reject buttons: the
  // decision goes over the page's own API connection (mesh.taskResolve).
  function renderEscalated(res) {
    const served = Array.isArray(res && res.tasks) ? res.tasks.filter((t) => t.role === "served") : [];
    $("esc-count").textContent = served.length;
    fillTable($("esc-table"), served.map((t) => {
      const actions = el("span");
      for (const [label, approve] of [["approve", true], ["reject", false]]) {
        const b = el("button", label, label);
        b.type = "button";
        b.dataset.task = t.taskId;
        b.addEventListener("click", () => resolve(t.taskId, approve));
        actions.append(b);
      }
      return [el("code", t.taskId), t.capability, el("code", short(t.requester)), actions];
    }), res && res.missing ? "not kept by this node" : "none");
  }

  async function resolve(taskId, approve) {
    const verb = approve ? "approved" : "rejected";
    try {
      const t = await call("mesh.taskResolve", { taskId, approve, reason: verb + " on the status page" });
      $("esc-result").textContent = "task " + taskId + " " + verb + ": " + t.state;
    } catch (e) {
      $("esc-result").textContent = "task " + taskId + ": " + e.message;
    }
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // drawGraph puts this node in the middle and its peers on an ellipse
  // around it, each edge coloured by connection type.
  function drawGraph(status, peers, connected) {
    const g = $("graph");
    const edges = [];
    const nodes = [];
    const n = peers.length;
    peers.forEach((p, i) => {
      // Two peers go left and right, three make a triangle, and so on.
      const a = Math.PI / 2 + Math.PI / Math.max(n, 1) + (2 * Math.PI * i) / Math.max(n, 1);
      const x = Math.round(230 * Math.cos(a));
      const y = Math.round(135 * Math.sin(a));
      edges.push(svg("line", { x1: 0, y1: 0, x2: x, y2: y, class: "edge " + p.kind }));
      const node = svg("g", { class: "peer " + p.kind, transform: `translate(${x},${y})`, "data-agent": p.agentId });
      node.append(svg("title", {}, p.agentId + " (" + p.kind + ")"));
      node.append(svg("circle", { r: 14 }));
      node.append(svg("text", { y: 28 }, p.name || short(p.agentId)));
      node.append(svg("text", { y: 41, class: "sub" }, p.kind));
      nodes.push(node);
    });
    const self = svg("g", { class: "self" });
    self.append(svg("title", {}, status.agentId + " (this node)"));
    self.append(svg("circle", { r: 22 }));
    self.append(svg("text", { y: 38 }, "this node"));
    self.append(svg("text", { y: 51, class: "sub" }, short(status.agentId)));
    g.replaceChildren(...edges, ...nodes, self);
    g.dataset.peers = String(connected);
  }

  connect();
})();
