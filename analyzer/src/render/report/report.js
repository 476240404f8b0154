// vramtrace report: the hover read-out and the live set at a moment, from the embedded
// data (#vt-data). Text goes in through textContent only: nothing from a trace is markup.
// With #selftest in the address, the page checks itself and writes #vt-selftest.
(function () {
  var errors = [];
  function mark(id, text) {
    var old = document.getElementById(id);
    if (old) { old.textContent = text; return; }
    var d = document.createElement('pre');
    d.id = id; d.textContent = text; d.style.display = 'none';
    document.body.appendChild(d);
  }
  window.addEventListener('error', function (e) {
    errors.push(String(e.message));
    mark('vt-error', errors.join('\n'));
  });
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function bin(n) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'], i = 0, v = n;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(v)) + ' ' + u[i];
  }
  function secs(ns) { return (ns / 1e9).toFixed(ns < 1e7 ? 6 : 3) + 's'; }
  // The last index with t[i] <= x (0 before the first).
  function at(t, x) {
    var lo = 0, hi = t.length - 1;
    if (hi < 0) return -1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (t[mid] <= x) lo = mid; else hi = mid - 1; }
    return lo;
  }
  var data = JSON.parse(document.getElementById('vt-data').textContent);

  function timeAt(svg, ev) {
    var pt = svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    var m = svg.getScreenCTM();
    if (!m) return 0;
    var p = pt.matrixTransform(m.inverse());
    var left = +svg.getAttribute('data-left'), right = +svg.getAttribute('data-right');
    var tend = +svg.getAttribute('data-tend');
    var f = Math.min(1, Math.max(0, (p.x - left) / (right - left)));
    return { t: f * tend, x: left + f * (right - left) };
  }

  function readout(i, d, t) {
    var box = document.getElementById('vt-readout-' + i);
    box.textContent = '';
    box.appendChild(el('b', '', 'at ' + secs(t)));
    d.lines.forEach(function (l) {
      var k = at(l.t, t);
      var sw = el('span', 'sw'); sw.style.background = l.color;
      box.appendChild(sw);
      box.appendChild(document.createTextNode(l.name + ' ' + (k < 0 ? '-' : bin(l.b[k]))));
    });
  }

  // The moment shown for a click at t: the last one at or before it (the state then),
  // or the first when t is before every moment.
  function nearest(d, t) {
    var ts = d.moments.map(function (m) { return m[0]; });
    var k = at(ts, t);
    return k < 0 ? -1 : k;
  }

  function liveset(i, d, k, asked) {
    var box = document.getElementById('vt-live-' + i);
    box.textContent = '';
    if (!d.moments.length) {
      box.appendChild(el('p', 'muted', 'No live set was kept for this GPU.'));
      return;
    }
    if (k < 0) {
      box.appendChild(el('p', 'muted', 'Nothing was live yet: the first moment kept is at ' + secs(d.moments[0][0]) + '.'));
      return;
    }
    var m = d.moments[k];
    var layer = m[2] === 'allocated' ? 'tensors' : 'blocks';
    var title = (m[1] ? m[1] + ': ' : '') + bin(m[3]) + ' live at ' + secs(m[0]) +
      ' in ' + m[4] + ' ' + (m[4] === 1 ? layer.replace(/s$/, '') : layer) +
      (m[2] === 'allocated' ? ' (requested bytes)' : ' (reserved)');
    box.appendChild(el('h3', '', title));
    if (asked !== undefined && Math.abs(asked - m[0]) > 0) {
      box.appendChild(el('p', 'muted small', 'Clicked ' + secs(asked) + '; this is the last moment kept at or before it.'));
    }
    var chips = el('div', 'chips');
    d.moments.forEach(function (o, j) {
      if (!o[1]) return;
      var b = el('button', '', o[1] + ' ' + secs(o[0]));
      b.addEventListener('click', function () { show(i, j); });
      chips.appendChild(b);
    });
    if (chips.childNodes.length) box.appendChild(chips);
    var table = el('table'), head = el('tr');
    ['bytes', '', layer, 'pid', 'who allocated'].forEach(function (h, c) {
      head.appendChild(el('th', c < 3 ? 'n' : '', h));
    });
    var thead = el('thead'); thead.appendChild(head); table.appendChild(thead);
    var body = el('tbody'), shown = 0;
    m[5].forEach(function (g) {
      var tr = el('tr');
      var b = el('td', 'n', bin(g[2])); b.title = g[2] + ' bytes'; tr.appendChild(b);
      var bar = el('span', 'bar'); bar.style.width = Math.max(1, Math.round(120 * g[2] / Math.max(1, m[3]))) + 'px';
      var tdb = el('td', 'n'); tdb.appendChild(bar); tr.appendChild(tdb);
      tr.appendChild(el('td', 'n', String(g[3])));
      tr.appendChild(el('td', '', g[1] === null || g[1] === undefined ? '-' : String(g[1])));
      tr.appendChild(el('td', 'who', data.who[g[0]] || '?'));
      body.appendChild(tr); shown += g[2];
    });
    table.appendChild(body); box.appendChild(table);
    if (m[3] > shown && m[5].length) {
      box.appendChild(el('p', 'muted small', bin(m[3] - shown) + ' more in smaller groups.'));
    }
  }

  function show(i, k) { liveset(i, data.devices[i], k); }

  data.devices.forEach(function (d, i) {
    var svg = document.getElementById('vt-plot-' + i);
    if (!svg) return;
    var hit = svg.querySelector('.vt-hit'), cursor = svg.querySelector('.vt-cursor');
    hit.addEventListener('mousemove', function (ev) {
      var p = timeAt(svg, ev);
      cursor.setAttribute('x1', p.x); cursor.setAttribute('x2', p.x);
      cursor.setAttribute('visibility', 'visible');
      readout(i, d, p.t);
    });
    hit.addEventListener('click', function (ev) {
      var p = timeAt(svg, ev);
      liveset(i, d, nearest(d, p.t), p.t);
    });
    // At first, the peak's live set.
    var peak = -1;
    d.moments.forEach(function (m, j) { if (m[1] === 'peak') peak = j; });
    liveset(i, d, peak >= 0 ? peak : nearest(d, d.peak_time_ns));
  });

  function selftest() {
    var r = { errors: errors.slice() };
    var h = window.innerHeight || 768;
    var v = document.getElementById('vt-verdict').getBoundingClientRect();
    r.verdict_on_first_screen = v.top >= 0 && v.bottom <= h;
    r.verdict = document.getElementById('vt-verdict').textContent;
    var plot = document.getElementById('vt-plot-0');
    r.plot_on_first_screen = !!plot && plot.getBoundingClientRect().top < h;
    r.plot_below_verdict = !!plot && plot.getBoundingClientRect().top >= v.bottom;
    r.devices = [];
    data.devices.forEach(function (d, i) {
      var svg = document.getElementById('vt-plot-' + i);
      var hit = svg.querySelector('.vt-hit').getBoundingClientRect();
      var x = hit.left + hit.width * 0.5, y = hit.top + hit.height * 0.5;
      var o = { title: d.title };
      var ro = document.getElementById('vt-readout-' + i);
      ro.textContent = '';
      svg.querySelector('.vt-hit').dispatchEvent(new MouseEvent('mousemove', { clientX: x, clientY: y, bubbles: true }));
      o.hover = ro.textContent;
      var live = document.getElementById('vt-live-' + i);
      live.textContent = '';
      svg.querySelector('.vt-hit').dispatchEvent(new MouseEvent('click', { clientX: x, clientY: y, bubbles: true }));
      o.click_rows = live.querySelectorAll('tbody tr').length;
      o.click_title = (live.querySelector('h3') || { textContent: '' }).textContent;
      // At the right edge: the last moment (memory at the end of the run).
      live.textContent = '';
      svg.querySelector('.vt-hit').dispatchEvent(new MouseEvent('click', { clientX: hit.right - 1, clientY: y, bubbles: true }));
      o.click_end_title = (live.querySelector('h3') || { textContent: '' }).textContent;
      var peak = -1;
      d.moments.forEach(function (m, j) { if (m[1] === 'peak') peak = j; });
      if (peak >= 0) { show(i, peak); o.peak_title = live.querySelector('h3').textContent; o.peak_rows = live.querySelectorAll('tbody tr').length; }
      o.flamegraphs = document.querySelectorAll('iframe.vt-flame').length;
      r.devices.push(o);
    });
    r.errors = errors.slice();
    mark('vt-selftest', JSON.stringify(r));
  }
  if (location.hash === '#selftest') selftest();
  mark('vt-rendered', 'ok');
})();
