// A page's live parts: plotly charts redrawn in place, progress bars and tables, following a feed (live_feed.py).
//
// st.plotly_chart gives a chart a new identity whenever its figure changes, so a timer's redraw mounted a new
// chart and dropped the old one. Here one element keeps its chart and Plotly.react updates it; plotly.js
// comes from the app's server (data.src), loaded once per page. A part given a feed (data.feed) also polls
// the feed's URL while its run is active: the parts of one page share one poller per feed, each gets its
// chart's newest figure, and the page is asked to rerun (the "stale" trigger) when the feed's stamp says
// that its buttons and messages no longer show the run's state. No Streamlit rerun happens in between.

function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  window.explorerPlotlyLoading ??= new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = src;
    script.onload = () => resolve(window.Plotly);
    script.onerror = () => {
      window.explorerPlotlyLoading = undefined;
      reject(new Error(`plotly.js did not load from ${src}`));
    };
    document.head.appendChild(script);
  });
  return window.explorerPlotlyLoading;
}

// ---- charts --------------------------------------------------------------------------------------

// Draw the latest figure; figures that arrive while one is drawn replace each other, so a slow browser
// draws the newest and skips the ones in between.
async function draw(chart) {
  try {
    const Plotly = await loadPlotly(chart.src);
    while (chart.drawn !== chart.latest) {
      const figureJson = chart.latest;
      chart.drawn = figureJson;
      const figure = JSON.parse(figureJson);
      await Plotly.react(chart, figure.data, figure.layout, chart.config);
    }
  } catch (error) {
    chart.textContent = `This chart could not be drawn: ${error.message}`;
  } finally {
    chart.drawing = null;
  }
}

function showFigure(chart, figureJson) {
  chart.latest = figureJson;
  chart.drawing ??= draw(chart);
}

function mountChart(parentElement, data) {
  let chart = parentElement.querySelector(".explorer-live-chart");
  if (!chart) {
    chart = document.createElement("div");
    chart.className = "explorer-live-chart";
    parentElement.appendChild(chart);
    // Follow the page's width (a window resized, the sidebar opened or closed), as st.plotly_chart does.
    let width = 0;
    chart.resized = new ResizeObserver(([entry]) => {
      if (Math.abs(entry.contentRect.width - width) < 1) return;
      width = entry.contentRect.width;
      if (chart.drawn && window.Plotly) window.Plotly.Plots.resize(chart);
    });
    chart.resized.observe(chart);
  }
  chart.src = data.src;
  chart.config = data.config;
  return {kind: "chart", update: ({figure}) => showFigure(chart, figure),
          unmount: () => { chart.resized.disconnect(); if (window.Plotly) window.Plotly.purge(chart); }};
}

// ---- progress bars -------------------------------------------------------------------------------

// A bar drawn as st.progress draws its own (Streamlit 1.67: its blue on the theme's secondary background), so
// it does not change colour when the ended run's page replaces it by st.progress; `set(percent)` moves it.
function progressBar() {
  const track = document.createElement("div");
  track.setAttribute("role", "progressbar");
  track.setAttribute("aria-valuemin", "0");
  track.setAttribute("aria-valuemax", "100");
  track.style.cssText = "height: 0.5rem; border-radius: 0.25rem; overflow: hidden; " +
    "background: var(--st-secondary-background-color, #f0f2f6);";
  const bar = track.appendChild(document.createElement("div"));
  bar.style.cssText = "height: 100%; width: 0; background: #1c83e1;";
  track.set = (percent) => {
    bar.style.width = `${percent}%`;
    track.setAttribute("aria-valuenow", String(percent));
  };
  return track;
}

function mountProgress(parentElement) {
  let box = parentElement.querySelector(".explorer-live-progress");
  if (!box) {
    box = document.createElement("div");
    box.className = "explorer-live-progress";
    box.innerHTML = `<p class="explorer-live-progress-text" style="margin: 0 0 0.25rem; font-size: 0.875rem;"></p>`;
    box.bar = box.appendChild(progressBar());
    parentElement.appendChild(box);
  }
  const update = ({progress: {fraction, text}}) => {
    box.querySelector(".explorer-live-progress-text").textContent = text;  // text, never markup
    box.bar.set(Math.round(Math.min(Math.max(fraction, 0), 1) * 100));
  };
  return {kind: "progress", update, unmount: () => {}};
}

// ---- tables --------------------------------------------------------------------------------------

// A small table (a grid's runs) redrawn from the feed's rows: every cell is text (never markup), and the
// progress column's numbers (0-100) are drawn as bars.
function mountTable(parentElement) {
  let table = parentElement.querySelector(".explorer-live-table");
  if (!table) {
    table = document.createElement("table");
    table.className = "explorer-live-table";
    table.style.cssText = "width: 100%; border-collapse: collapse; font-size: 0.875rem; margin-bottom: 1rem;";
    table.createTHead().insertRow();
    table.createTBody();
    parentElement.appendChild(table);
  }
  const cellStyle = "padding: 0.25rem 0.5rem; text-align: left; border-bottom: 1px solid rgba(49, 51, 63, 0.1);";
  const update = ({table: {columns, rows, progress_column}}) => {
    const head = table.tHead.rows[0];
    if (JSON.stringify(Array.from(head.cells, (cell) => cell.textContent)) !== JSON.stringify(columns)) {
      head.replaceChildren(...columns.map((name) => {
        const cell = document.createElement("th");
        cell.style.cssText = `${cellStyle} font-weight: 600;`;
        cell.textContent = name;
        return cell;
      }));
    }
    const progressAt = columns.indexOf(progress_column);
    table.tBodies[0].replaceChildren(...rows.map((row) => {
      const line = document.createElement("tr");
      row.forEach((value, i) => {
        const cell = line.insertCell();
        cell.style.cssText = cellStyle;
        if (i === progressAt && typeof value === "number") {
          const percent = Math.round(Math.min(Math.max(value, 0), 100));
          const bar = cell.appendChild(progressBar());
          bar.style.minWidth = "4rem";
          bar.set(percent);
          cell.title = `${percent}%`;
        } else {
          cell.textContent = value === null || value === undefined ? "" : String(value);
        }
      });
      return line;
    }));
  };
  return {kind: "table", update, unmount: () => {}};
}

// ---- feeds ---------------------------------------------------------------------------------------

const feeds = (window.explorerLiveFeeds ??= new Map());  // feed URL -> {parts, stamp, polling, ...}
const ASK_AGAIN_MS = 2000;  // a rerun asked for and not yet drawn is asked for again after this long

function feedAt(url) {
  let feed = feeds.get(url);
  if (!feed) {
    feed = {url, parts: new Map(), stamp: null, drawn: -Infinity, period: 200, polling: false, askedAt: -Infinity,
            asks: 0};
    feeds.set(url, feed);
  }
  return feed;
}

// Ask the page to rerun: its widgets no longer show the feed's state (or the feed is gone). Each ask goes
// through the next of the feed's parts, so an ask a part's fragment could not take is made again by another.
function askRerun(feed) {
  const now = performance.now();
  if (now - feed.askedAt < ASK_AGAIN_MS || !feed.parts.size) return;
  const parts = [...feed.parts.values()];
  feed.askedAt = now;
  parts[feed.asks++ % parts.length].setTriggerValue("stale", now);
}

const QUIET_MAX_MS = 1000;  // a feed with nothing new (a run queued or paused) is asked less often, down to this
const GAP_MIN_MS = 50;  // the least time between one answer and the next ask (a slow server is not asked back to back)

async function poll(feed) {
  feed.polling = true;
  let delay = feed.period, shown = null;
  try {
    while (feed.parts.size) {
      const asked = performance.now();  // the period runs from ask to ask: a 60 ms answer leaves 140 ms to wait
      const have = {};
      for (const [name, part] of feed.parts) if (part.version) have[name] = part.version;
      let body = null;
      try {
        const reply = await fetch(`${feed.url}?have=${encodeURIComponent(JSON.stringify(have))}`, {cache: "no-store"});
        if (reply.status === 404) {  // the server dropped the feed: the page publishes a new one when it reruns
          askRerun(feed);
          break;
        }
        if (reply.ok) body = await reply.json();
      } catch (error) {
        // the server is busy or restarting: ask again at the next period
      }
      if (body) {
        for (const [name, chart] of Object.entries(body.charts)) {
          const part = feed.parts.get(name);
          if (part) {
            part.version = chart.version;
            part.update({figure: chart.figure});
          }
        }
        for (const kind of ["progress", "table"]) {
          if (body[kind]) for (const part of feed.parts.values()) if (part.kind === kind) part.update({[kind]: body[kind]});
        }
        if (body.stamp !== feed.stamp) askRerun(feed);
        else if (!body.active) break;  // the run ended and the page shows it: nothing more will change
        const now = JSON.stringify([body.progress?.text, body.table]);
        const quiet = !Object.keys(body.charts).length && now === shown;
        shown = now;
        delay = quiet ? Math.min(delay * 1.5, QUIET_MAX_MS) : feed.period;
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(delay - (performance.now() - asked), GAP_MIN_MS)));
    }
  } finally {
    feed.polling = false;
    if (!feed.parts.size) feeds.delete(feed.url);
  }
}

// Leave every feed this part follows, but the one at `url`.
function unfollow(part, url = null) {
  for (const [other, feed] of feeds) {
    if (other === url) continue;
    for (const [name, member] of feed.parts) if (member === part) feed.parts.delete(name);
  }
}

function follow(part, link) {
  unfollow(part, link.url);  // it followed another feed before (a new run, a new token)
  const feed = feedAt(link.url);
  if (link.drawn >= feed.drawn) {  // the newest drawing's stamp is the page's (Streamlit may hand a part older data)
    if (feed.stamp !== link.stamp) feed.askedAt = -Infinity;  // the page drew a new state: a new ask may come
    feed.stamp = link.stamp;
    feed.drawn = link.drawn;
  }
  feed.period = link.period_ms;
  if (link.drawn >= (part.drawn ?? -Infinity)) {
    part.version = link.version;
    part.drawn = link.drawn;
  }
  feed.parts.set(link.part, part);
  if (!feed.polling) poll(feed);
}

// ---- the component -------------------------------------------------------------------------------

export default function ({ parentElement, data, setTriggerValue }) {
  const mount = {progress: mountProgress, table: mountTable}[data.kind] ?? mountChart;
  const part = (parentElement.explorerLivePart ??= mount(parentElement, data));
  part.setTriggerValue = setTriggerValue;
  // Streamlit may call this again with the data it last sent (not only after a rerun): the feed has drawn
  // newer figures since, so only new data from the page is drawn.
  const drawn = data.kind === "chart" ? data.figure : JSON.stringify(data[data.kind]);
  if (part.drawnFromPage !== drawn) {
    part.drawnFromPage = drawn;
    part.update(data);
  }
  if (data.feed) follow(part, data.feed);
  else unfollow(part);  // the page shows an ended run: nothing to follow
  return () => {  // unmounted: the run's live parts left the page
    unfollow(part);
    part.unmount();
    parentElement.explorerLivePart = undefined;
  };
}
