// browser.js — drive Debian's headless Chromium through its DevTools protocol on a pipe
// (--remote-debugging-pipe: no port, no npm package) for the views' browser test.
//
//   node scripts/browser.js PLAN.json   ->   a JSON report on stdout
//
// PLAN: { "chromium": "/usr/bin/chromium", "width": 1400, "height": 1800, "timeout_ms": 20000,
//         "pages": [ { "url": "file:///.../views.html", "ready": "JS expression true when drawn",
//                      "steps": [ { "eval": "expr", "as": "name" },         // its value in results.name
//                                 { "hover": "expr -> {x, y}" },            // a real mouse move there
//                                 { "click": "expr -> {x, y}" },            // press and release there
//                                 { "wait": 200 },                          // milliseconds
//                                 { "profile": "expr", "as": "name" },      // the 15 costliest functions while expr runs
//                                 { "screenshot": "/path.png" } ] } ] }     // the viewport as PNG
// Report: { "pages": [ { "url", "load_ms", "ready_ms", "cpu_ms", "errors": [text, ...], "results": {...},
//                         "screenshots": {path: bytes} } ] }   (cpu_ms: the renderers' CPU time to load and draw)
// errors holds every console error, uncaught exception and failed or blocked load (the network
// and CSP violations included): a page passes when it is empty.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawn } = require("child_process");

const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "olv-chromium-"));
const args = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
  "--hide-scrollbars", "--mute-audio", "--user-data-dir=" + profile, "about:blank"];
const child = spawn(plan.chromium || "chromium", args, { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
let stderr = "";
child.stderr.on("data", (d) => { stderr += d; if (stderr.length > 20000) stderr = stderr.slice(-20000); });
const timeout = plan.timeout_ms || 20000;

let nextId = 1, buf = Buffer.alloc(0);
const pending = new Map(), listeners = [];
child.stdio[4].on("data", (chunk) => {
  buf = Buffer.concat([buf, chunk]);
  let z;
  while ((z = buf.indexOf(0)) >= 0) {
    const msg = JSON.parse(buf.slice(0, z).toString("utf8"));
    buf = buf.slice(z + 1);
    if (msg.id && pending.has(msg.id)) {
      const p = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) p.reject(new Error(p.method + ": " + msg.error.message)); else p.resolve(msg.result);
    } else if (msg.method) {
      listeners.forEach((f) => f(msg));
    }
  }
});
function send(method, params, sessionId) {
  const id = nextId++;
  const msg = { id, method, params: params || {} };
  if (sessionId) msg.sessionId = sessionId;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, method });
    child.stdio[3].write(JSON.stringify(msg) + "\0");
  });
}
function waitEvent(method, sessionId, ms) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("timed out waiting for " + method)), ms);
    listeners.push(function f(msg) {
      if (msg.method === method && msg.sessionId === sessionId) {
        clearTimeout(t);
        listeners.splice(listeners.indexOf(f), 1);
        resolve(msg.params);
      }
    });
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function evaluate(s, expr) {
  const r = await send("Runtime.evaluate", { expression: expr, returnByValue: true, awaitPromise: true }, s);
  if (r.exceptionDetails) throw new Error("evaluate " + JSON.stringify(expr) + ": " + (r.exceptionDetails.exception && r.exceptionDetails.exception.description || r.exceptionDetails.text));
  return r.result.value;
}

async function rendererCpu() {
  const r = await send("SystemInfo.getProcessInfo");
  return r.processInfo.filter((p) => p.type === "renderer").reduce((a, p) => a + p.cpuTime, 0);
}

async function runPage(page) {
  const out = { url: page.url, errors: [], results: {}, screenshots: {} };
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId: s } = await send("Target.attachToTarget", { targetId, flatten: true });
  listeners.push((msg) => {
    if (msg.sessionId !== s) return;
    const p = msg.params;
    if (msg.method === "Runtime.consoleAPICalled" && (p.type === "error" || p.type === "assert")) {
      out.errors.push("console." + p.type + ": " + p.args.map((a) => a.value !== undefined ? a.value : a.description).join(" "));
    } else if (msg.method === "Runtime.exceptionThrown") {
      const d = p.exceptionDetails;
      out.errors.push("exception: " + (d.exception && d.exception.description || d.text));
    } else if (msg.method === "Log.entryAdded" && p.entry.level === "error") {
      out.errors.push("log: " + p.entry.text + (p.entry.url ? " (" + p.entry.url + ")" : ""));
    } else if (msg.method === "Network.loadingFailed" && !p.canceled) {
      out.errors.push("load failed: " + p.errorText + (p.blockedReason ? " (" + p.blockedReason + ")" : ""));
    }
  });
  await send("Runtime.enable", {}, s);
  await send("Log.enable", {}, s);
  await send("Network.enable", {}, s);
  await send("Page.enable", {}, s);
  await send("Emulation.setDeviceMetricsOverride", { width: plan.width || 1400, height: plan.height || 1800, deviceScaleFactor: 1, mobile: false }, s);
  const loaded = waitEvent("Page.loadEventFired", s, timeout);
  const cpu0 = await rendererCpu();
  const t0 = Date.now();
  await send("Page.navigate", { url: page.url }, s);
  await loaded;
  out.load_ms = Date.now() - t0;
  if (page.ready) {
    const until = Date.now() + timeout;
    while (!(await evaluate(s, page.ready))) {
      if (Date.now() > until) throw new Error("page not ready: " + page.ready);
      await sleep(50);
    }
    out.ready_ms = Date.now() - t0;
  }
  // the renderers' CPU time for loading and drawing the page: on a busy machine the wall time
  // above counts the other processes' turns too
  out.cpu_ms = Math.round(1000 * ((await rendererCpu()) - cpu0));
  for (const st of page.steps || []) {
    if (st.profile) {
      // the functions that took the most time (self time, sampled) while expr ran
      await send("Profiler.enable", {}, s);
      await send("Profiler.setSamplingInterval", { interval: 200 }, s);
      await send("Profiler.start", {}, s);
      await evaluate(s, st.profile);
      const { profile } = await send("Profiler.stop", {}, s);
      const self = new Map(), dt = profile.timeDeltas || [], byId = new Map(profile.nodes.map((n) => [n.id, n]));
      (profile.samples || []).forEach((id, i) => {
        const f = byId.get(id).callFrame, k = (f.functionName || "(anon)") + " " + f.url.split("/").pop() + ":" + f.lineNumber + ":" + f.columnNumber;
        self.set(k, (self.get(k) || 0) + (dt[i] || 0));
      });
      out.results[st.as || "profile"] = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15).map(([k, us]) => Math.round(us / 1000) + " ms " + k);
    } else if (st.eval) {
      out.results[st.as || st.eval] = await evaluate(s, st.eval);
    } else if (st.hover || st.click) {
      const p = await evaluate(s, st.hover || st.click);
      if (!p || typeof p.x !== "number") throw new Error("no point from " + (st.hover || st.click));
      await send("Input.dispatchMouseEvent", { type: "mouseMoved", x: p.x, y: p.y }, s);
      if (st.click) {
        await send("Input.dispatchMouseEvent", { type: "mousePressed", x: p.x, y: p.y, button: "left", clickCount: 1 }, s);
        await send("Input.dispatchMouseEvent", { type: "mouseReleased", x: p.x, y: p.y, button: "left", clickCount: 1 }, s);
      }
      await sleep(st.settle_ms || 150);
    } else if (st.wait) {
      await sleep(st.wait);
    } else if (st.screenshot) {
      const r = await send("Page.captureScreenshot", { format: "png" }, s);
      const png = Buffer.from(r.data, "base64");
      fs.writeFileSync(st.screenshot, png);
      out.screenshots[st.screenshot] = png.length;
    }
  }
  await send("Target.closeTarget", { targetId });
  return out;
}

(async () => {
  const report = { pages: [] };
  let rc = 0;
  try {
    for (const page of plan.pages) {
      try { report.pages.push(await runPage(page)); } catch (e) {
        report.pages.push({ url: page.url, errors: ["driver: " + e.message], results: {}, screenshots: {} });
      }
    }
  } catch (e) {
    report.error = e.message + (stderr ? " (chromium: " + stderr.slice(-2000) + ")" : "");
    rc = 1;
  }
  process.stdout.write(JSON.stringify(report) + "\n");
  try { await send("Browser.close"); } catch (e) { /* already gone */ }
  setTimeout(() => { child.kill("SIGKILL"); }, 2000).unref();
  child.on("exit", () => { fs.rmSync(profile, { recursive: true, force: true }); process.exit(rc); });
})();
setTimeout(() => {
  process.stdout.write(JSON.stringify({ error: "browser.js: overall timeout", stderr: stderr.slice(-2000) }) + "\n");
  child.kill("SIGKILL");
  process.exit(1);
}, (plan.overall_timeout_ms || 120000)).unref();
