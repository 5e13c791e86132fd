// The page: translate lines through /v1/translate, show each line's n-best list, and
// draw the chosen line's cross-attention (/v1/attention) with its word alignment.
"use strict";

const $ = (id) => document.getElementById(id);
let results = [];       // [{source, translation}] of the last answer
let chosen = 0;         // the line whose attention is drawn

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

async function describeModel() {
  const model = await (await fetch("/v1/model")).json();
  $("model").textContent = `${model.engine} engine · ${model.num_layers} decoder layers · ` +
      `${model.num_heads} heads · up to ${model.limits.max_lines} lines of ` +
      `${model.limits.max_chars} characters`;
  $("beam").value = model.beam_size;
  $("beam").max = model.limits.max_beam;
  for (let layer = 0; layer < model.num_layers; layer++) {
    $("layer").add(new Option(`${layer}`, `${layer}`, false, layer === model.num_layers - 1));
  }
  for (let head = 0; head < model.num_heads; head++) $("head").add(new Option(`${head}`, `${head}`));
}

function hypothesisText(h) {
  const span = document.createElement("span");
  span.textContent = h.text;
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = h.score.toFixed(4);
  return [span, score];
}

function showResults() {
  const box = $("results");
  box.replaceChildren();
  results.forEach((r, k) => {
    const div = document.createElement("div");
    div.className = "line" + (k === chosen ? " chosen" : "");
    const source = document.createElement("div");
    source.textContent = r.source;
    const best = document.createElement("div");
    best.className = "best";
    best.append(...hypothesisText(r.translation));
    const list = document.createElement("ol");
    list.className = "nbest";
    for (const h of r.translation.nbest) {
      const item = document.createElement("li");
      item.append(...hypothesisText(h));
      list.append(item);
    }
    div.append(source, best, list);
    div.onclick = () => { chosen = k; showResults(); drawAttention(); };
    box.append(div);
  });
}

async function translate() {
  $("error").textContent = "";
  const lines = $("source").value.split("\n").filter((line) => line.trim() !== "");
  if (lines.length === 0) { $("error").textContent = "Type a sentence first."; return; }
  try {
    const data = await post("/v1/translate", {text: lines, beam_size: Number($("beam").value),
                                              n_best: Number($("nbest").value)});
    results = lines.map((source, k) => ({source, translation: data.translations[k]}));
    chosen = 0;
    showResults();
    await drawAttention();
  } catch (e) {
    $("error").textContent = e.message;
  }
}

function drawHeatmap(map) {
  const canvas = $("heatmap"), ctx = canvas.getContext("2d");
  const rows = map.target_pieces.length, cols = map.source_pieces.length, cell = 28;
  ctx.font = "12px sans-serif";
  const left = 10 + Math.max(...map.target_pieces.map((p) => ctx.measureText(p).width));
  const top = 10 + Math.max(...map.source_pieces.map((p) => ctx.measureText(p).width));
  canvas.width = left + cols * cell + 10;
  canvas.height = top + rows * cell + 10;
  ctx.font = "12px sans-serif";
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let t = 0; t < rows; t++) {
    for (let s = 0; s < cols; s++) {
      const shade = Math.round(255 * (1 - map.weights[t][s]));
      ctx.fillStyle = `rgb(${shade}, ${shade}, 255)`;
      ctx.fillRect(left + s * cell, top + t * cell, cell, cell);
    }
    ctx.fillStyle = "#222";
    ctx.textAlign = "right";
    ctx.fillText(map.target_pieces[t], left - 4, top + t * cell + cell * 0.65);
  }
  ctx.save();
  ctx.textAlign = "left";
  for (let s = 0; s < cols; s++) {   // source pieces written upwards above their columns
    ctx.setTransform(1, 0, 0, 1, left + s * cell + cell * 0.65, top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(map.source_pieces[s], 0, 0);
  }
  ctx.restore();
  // The word alignment: each aligned (source word, target word) outlines the cells of
  // their pieces.
  ctx.strokeStyle = "#d00";
  ctx.lineWidth = 2;
  for (const [i, j] of map.alignment) {
    for (let t = 0; t < map.target_words.length; t++) {
      for (let s = 0; s < map.source_words.length; s++) {
        if (map.target_words[t] === j && map.source_words[s] === i) {
          ctx.strokeRect(left + s * cell + 2, top + t * cell + 2, cell - 4, cell - 4);
        }
      }
    }
  }
  canvas.dataset.rows = rows;
  canvas.dataset.cols = cols;
  canvas.dataset.aligned = map.alignment.length;
}

async function drawAttention() {
  const r = results[chosen];
  if (!r || r.translation.text.trim() === "") return;
  const head = $("head").value === "" ? null : Number($("head").value);
  try {
    const map = await post("/v1/attention", {source: r.source, target: r.translation.text,
                                             layer: Number($("layer").value), head});
    $("caption").textContent = `Cross-attention of layer ${$("layer").value}, ` +
        `${head === null ? "mean of heads" : "head " + head}; outlined: the word alignment.`;
    drawHeatmap(map);
  } catch (e) {
    $("error").textContent = e.message;
  }
}

$("translate").onclick = translate;
$("layer").onchange = drawAttention;
$("head").onchange = drawAttention;
describeModel().catch((e) => { $("error").textContent = e.message; });
