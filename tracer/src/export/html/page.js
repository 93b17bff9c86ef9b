// Zoom, pan and read-out of the timeline: every lane shares one viewBox in bins.
(function () {
  "use strict";
  const root = document.getElementById("timeline");
  if (!root) return;
  const lanes = Array.from(root.querySelectorAll("svg.lane"));
  const bins = Number(root.dataset.bins), binS = Number(root.dataset.binS);
  const data = JSON.parse(document.getElementById("lanes").textContent);
  const ticks = document.getElementById("ticks"), readout = document.getElementById("readout"), cursor = document.getElementById("cursor");
  let from = 0, to = bins, drag = null;
  const fmt = (s) => (s < 10 ? s.toFixed(2) : s.toFixed(1)) + " s";
  function draw() {
    lanes.forEach((svg) => svg.setAttribute("viewBox", from + " 0 " + (to - from) + " 100"));
    ticks.textContent = "";
    for (let i = 0; i <= 5; i++) {
      const b = document.createElement("b");
      b.style.left = (i * 20) + "%";
      b.textContent = fmt((from + (to - from) * i / 5) * binS);
      ticks.appendChild(b);
    }
  }
  const binAt = (svg, x) => { const r = svg.getBoundingClientRect(); return from + (x - r.left) / r.width * (to - from); };
  function clamp() {
    const w = Math.min(Math.max(to - from, 4), bins);
    from = Math.min(Math.max(from, 0), bins - w); to = from + w;
  }
  lanes.forEach((svg) => {
    svg.addEventListener("wheel", (e) => {
      e.preventDefault();
      const at = binAt(svg, e.clientX), k = e.deltaY > 0 ? 1.25 : 0.8;
      from = at - (at - from) * k; to = at + (to - at) * k; clamp(); draw();
    }, { passive: false });
    svg.addEventListener("mousedown", (e) => { drag = { x: e.clientX, from, to, svg }; });
    svg.addEventListener("dblclick", () => { from = 0; to = bins; draw(); });
    svg.addEventListener("mousemove", (e) => show(svg, e));
  });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const r = drag.svg.getBoundingClientRect(), shift = (e.clientX - drag.x) / r.width * (drag.to - drag.from);
    from = drag.from - shift; to = drag.to - shift; clamp(); draw();
  });
  function pct(x) { return Math.round(x * 100) + "%"; }
  function show(svg, e) {
    const b = Math.floor(binAt(svg, e.clientX));
    if (b < 0 || b >= bins) return;
    const rr = root.getBoundingClientRect();
    cursor.style.display = "block"; cursor.style.left = (e.clientX - rr.left) + "px";
    const ns = data.bin_ns, lines = ["at " + fmt(b * binS) + " – " + fmt((b + 1) * binS)];
    for (const [dev, v] of Object.entries(data.gpu_util)) if (v[b] != null) lines.push("GPU " + dev + " utilization " + Math.round(v[b]) + "%");
    for (const [dev, v] of Object.entries(data.sm_active)) if (v[b] != null) lines.push("GPU " + dev + " SM active " + Math.round(v[b]) + "%");
    if (data.launches_per_s[b] != null) lines.push("kernel launches " + Math.round(data.launches_per_s[b]) + "/s");
    lines.push("synchronizing calls " + data.syncs[b] + ", " + pct(data.sync_ns[b] / ns) + " of the time");
    lines.push("copied " + data.copy_bytes[b] + " bytes, " + data.pageable_bytes[b] + " of them pageable");
    lines.push("GPU queue empty " + pct(data.queue_empty_ns[b] / ns) + " of the time");
    const st = data.thread_state[b];
    if (st) lines.push("main thread: on CPU " + pct(st[0]) + ", runnable " + pct(st[1]) + ", I/O " + pct(st[2]) + ", asleep " + pct(st[3]));
    const kinds = ["input worker", "thread", "timer", "disk", "network", "gpu", "other"];
    const woken = data.woken_by[b].map((v, i) => v > 0 ? kinds[i] + " " + pct(v / ns) : null).filter((x) => x);
    if (woken.length) lines.push("main thread off CPU, woken by: " + woken.join(", "));
    if (data.steps[b]) lines.push(data.steps[b] + " step marker(s)");
    readout.textContent = lines.join("\n");
  }
  draw();
})();
