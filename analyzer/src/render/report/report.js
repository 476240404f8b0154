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
  // A snapshot without times is one moment: its dump.
  function when(ns) { return data.timeless ? 'its dump' : secs(ns); }
  // The last index with t[i] <= x (0 before the first).
  function at(t, x) {
    var lo = 0, hi = t.length - 1;
    if (hi < 0) return -1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (t[mid] <= x) lo = mid; else hi = mid - 1; }
    return lo;
  }
  var data = JSON.parse(document.getElementById('vt-data').textContent);

  function readout(i, d, t) {
    var box = document.getElementById('vt-readout-' + i);
    box.textContent = '';
    box.appendChild(el('b', '', 'at ' + when(t)));
    d.lines.forEach(function (l) {
      var k = at(l.t, t);
      var sw = el('span', 'sw'); sw.style.background = l.color;
      // A space as well as the margin: copied or read aloud, the layers stay apart.
      box.appendChild(document.createTextNode(' '));
      box.appendChild(sw);
      box.appendChild(document.createTextNode(l.name + ' ' + (k < 0 ? '-' : bin(l.b[k]))));
    });
  }

  // The moment shown for a click at t: the last one at or before it (the state then),
  // or -1 when t is before every moment (nothing was live yet).
  function nearest(d, t) {
    var ts = d.moments.map(function (m) { return m[0]; });
    var k = at(ts, t);
    return k < 0 || ts[k] > t ? -1 : k;
  }

  // d: the GPU's data; k: the moment shown (-1: before the first); asked: the time clicked.
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
    var title = (m[1] ? m[1] + ': ' : '') + bin(m[3]) + ' live at ' + when(m[0]) +
      ' in ' + m[4] + ' ' + (m[4] === 1 ? layer.replace(/s$/, '') : layer) +
      (m[2] === 'allocated' ? ' (requested bytes)' : ' (reserved)');
    box.appendChild(el('h3', '', title));
    if (asked !== undefined && Math.abs(asked - m[0]) > 0 && !data.timeless) {
      box.appendChild(el('p', 'muted small', 'Clicked ' + secs(asked) + '; this is the last moment kept at or before it.'));
    }
    var chips = el('div', 'chips');
    d.moments.forEach(function (o, j) {
      if (!o[1]) return;
      var b = el('button', '', o[1] + (data.timeless ? '' : ' ' + secs(o[0])));
      b.addEventListener('click', function () { show(i, j); });
      chips.appendChild(b);
    });
    if (chips.childNodes.length) box.appendChild(chips);
    var table = el('table'), head = el('tr');
    ['bytes', '', layer, 'process', 'who allocated'].forEach(function (h, c) {
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
      tr.appendChild(el('td', 'proc', g[1] === null || g[1] === undefined ? '-' : d.names[g[1]] || 'pid ' + g[1]));
      tr.appendChild(el('td', 'who', data.who[g[0]] || '?'));
      body.appendChild(tr); shown += g[2];
    });
    table.appendChild(body); box.appendChild(table);
    // Only the largest groups are kept per moment: say what the table leaves out.
    var more = (m[6] || 0) - m[5].length, rest = Math.max(0, m[3] - shown);
    if (more > 0) {
      box.appendChild(el('p', 'muted small vt-more', 'and ' + more + ' more ' + (more === 1 ? 'group' : 'groups') +
        (rest > 0 ? ', ' + bin(rest) : '') + ' (only the ' + m[5].length + ' largest are kept per moment).'));
    } else if (rest > 0 && m[5].length) {
      box.appendChild(el('p', 'muted small vt-more', bin(rest) + ' more not in these groups.'));
    }
  }

  function show(i, k) { liveset(i, data.devices[i], k); }

  var zooms = [];
  data.devices.forEach(function (d, i) {
    var svg = document.getElementById('vt-plot-' + i);
    if (!svg) return;
    var hit = svg.querySelector('.vt-hit'), cursor = svg.querySelector('.vt-cursor');
    var z = zooms[i] = vtZoom(svg, d.lines, d.bucket_ns, document.getElementById('vt-zoomout-' + i),
      document.getElementById('vt-zoomnote-' + i));
    hit.addEventListener('mousemove', function (ev) {
      var p = z.at(ev);
      cursor.setAttribute('x1', p.x); cursor.setAttribute('x2', p.x);
      cursor.setAttribute('visibility', 'visible');
      readout(i, d, p.t);
    });
    hit.addEventListener('click', function (ev) {
      // The click that ends a brush zoomed; it asks for no live set.
      if (z.dragged) { z.dragged = false; return; }
      var p = z.at(ev);
      liveset(i, d, nearest(d, p.t), p.t);
    });
    // At first, the peak's live set.
    var peak = -1;
    d.moments.forEach(function (m, j) { if (m[1] === 'peak') peak = j; });
    liveset(i, d, peak >= 0 ? peak : nearest(d, d.peak_time_ns));
  });

  // The time axis's labels, and the markers shown: [title, x] each.
  function ticks(svg) {
    return Array.prototype.map.call(svg.querySelectorAll('.vt-xaxis text'), function (e) { return e.textContent; });
  }
  function shown(svg) {
    var out = [];
    svg.querySelectorAll('line.vt-marker').forEach(function (e) {
      if (e.getAttribute('visibility') !== 'hidden') out.push([e.textContent, +e.getAttribute('x1')]);
    });
    return out;
  }
  // Brushes the left half of the plot with the mouse, then hovers and clicks inside the
  // window; zooms to twice the peak's time (a run's work crowded at its start); zooms out.
  function zoomtest(i, d, svg, o) {
    var z = zooms[i], hit = svg.querySelector('.vt-hit'), live = document.getElementById('vt-live-' + i);
    var r = hit.getBoundingClientRect(), y = r.top + r.height / 2;
    var a = r.left + 1, b = r.left + r.width / 2;
    function mouse(target, type, x) {
      target.dispatchEvent(new MouseEvent(type, { clientX: x, clientY: y, button: 0, bubbles: true }));
    }
    var phase = svg.querySelector('rect.vt-phase');
    function width() { return phase ? +phase.getAttribute('width') : 0; }
    o.axis = ticks(svg);
    o.markers = shown(svg);
    o.phase_width = width();
    mouse(hit, 'mousedown', a); mouse(hit, 'mousemove', b); mouse(window, 'mouseup', b);
    live.textContent = '';
    mouse(hit, 'click', b);
    o.brush_click_ignored = live.textContent === '';
    o.zoom_window = [z.t0, z.t1];
    o.zoom_axis = ticks(svg);
    o.zoom_phase_width = width();
    o.zoom_out_shown = !document.getElementById('vt-zoomout-' + i).hidden;
    // The middle of the window.
    mouse(hit, 'mousemove', b);
    o.zoom_hover = document.getElementById('vt-readout-' + i).textContent;
    mouse(hit, 'click', b);
    o.zoom_click_title = (live.querySelector('h3') || live.querySelector('p') || { textContent: '' }).textContent;
    o.zoom_click_rows = live.querySelectorAll('tbody tr').length;
    z.set(0, 2 * d.peak_time_ns);
    o.peak_zoom_axis = ticks(svg);
    o.peak_zoom_markers = shown(svg);
    mouse(hit, 'dblclick', b);
    o.reset_window = [z.t0, z.t1];
    o.reset_axis = ticks(svg);
    o.zoom_out_hidden = document.getElementById('vt-zoomout-' + i).hidden;
  }

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
      if (peak >= 0) { show(i, peak); o.peak_title = live.querySelector('h3').textContent; o.peak_rows = live.querySelectorAll('tbody tr').length;
        o.peak_more = (live.querySelector('.vt-more') || { textContent: '' }).textContent;
      }
      zoomtest(i, d, svg, o);
      o.flamegraphs = document.querySelectorAll('iframe.vt-flame').length;
      r.devices.push(o);
    });
    r.errors = errors.slice();
    mark('vt-selftest', JSON.stringify(r));
  }
  if (location.hash === '#selftest') selftest();
  mark('vt-rendered', 'ok');
})();
