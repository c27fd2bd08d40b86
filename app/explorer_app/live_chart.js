// A plotly chart redrawn in place: figures.show(..., live=True) on a page whose timer redraws it.
// st.plotly_chart gives a chart a new identity whenever its figure changes, so every redraw mounted a new
// chart (Plotly.newPlot) and dropped the old one, five times a second: the page jumped for a frame, and the
// browser took 0.64 of a core beside the training (0.47 in place). Here one element keeps its chart and
// Plotly.react updates it; plotly.js comes from the app's server (data.src), loaded once per page.

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

// Draw the latest figure; figures that arrive while one is drawn replace each other, so a slow browser
// draws the newest and skips the ones in between.
async function draw(chart) {
  try {
    const Plotly = await loadPlotly(chart.latest.src);
    while (chart.drawn !== chart.latest) {
      const data = chart.latest;
      chart.drawn = data;
      const figure = JSON.parse(data.figure);
      await Plotly.react(chart, figure.data, figure.layout, data.config);
    }
  } catch (error) {
    chart.textContent = `This chart could not be drawn: ${error.message}`;
  } finally {
    chart.drawing = null;
  }
}

export default function ({ parentElement, data }) {
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
  chart.latest = data;
  chart.drawing ??= draw(chart);
  return () => {  // unmounted: the run's charts left the page
    chart.resized.disconnect();
    if (window.Plotly) window.Plotly.purge(chart);
  };
}
