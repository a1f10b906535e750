// report.html's drawing: the report's timeline and decisions as SVG panels, with tooltips.
// Written for this project; no library. Data comes from the page's JSON script elements.
(function(){
"use strict";
const R=JSON.parse(document.getElementById("report-data").textContent);
const tl=R.timeline, ts=tl.t||[], end=ts.length?ts[ts.length-1]:1;
const W=1100, L=48, PW=W-L-16, tip=document.getElementById("tip");
const NS="http://www.w3.org/2000/svg";
function el(tag,attrs,parent){const e=document.createElementNS(NS,tag);
  for(const k in attrs)e.setAttribute(k,attrs[k]);if(parent)parent.appendChild(e);return e;}
function hmm(s){s=Math.round(s);const h=Math.floor(s/3600),m=Math.floor(s%3600/60),x=s%60;
  return h+":"+String(m).padStart(2,"0")+(x?":"+String(x).padStart(2,"0"):"");}
function clock(s){const d=new Date(Date.parse(R.start_time)+s*1000);return d.toISOString().slice(11,19)+" UTC";}
function xs(t){return L+PW*t/Math.max(end,1);}
function esc(s){return String(s).replace(/[&<>]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;"})[c]);}
function show(ev,text){tip.innerHTML=text;tip.style.display="block";
  tip.style.left=Math.min(ev.clientX+12,window.innerWidth-440)+"px";tip.style.top=(ev.clientY+12)+"px";}
function hide(){tip.style.display="none";}
function steps(vals,y){let d="";for(let i=0;i<ts.length;i++){const v=vals[i];if(v===null||v===undefined){continue;}
  const x0=xs(ts[i]),x1=xs(i+1<ts.length?ts[i+1]:ts[i]);d+=(d&&vals[i-1]!==null&&vals[i-1]!==undefined?"L":"M")+x0+","+y(v)+"L"+x1+","+y(v);}return d;}
function area(top,bottom,y){let up="",down=[];for(let i=0;i<ts.length;i++){const x0=xs(ts[i]),x1=xs(i+1<ts.length?ts[i+1]:ts[i]);
  up+=(up?"L":"M")+x0+","+y(top[i])+"L"+x1+","+y(top[i]);down.push(x1+","+y(bottom[i]),x0+","+y(bottom[i]));}
  return up?up+"L"+down.reverse().join("L")+"Z":"";}
function ticks(svg,H){const steps=[60,120,300,600,900,1800,3600,7200,10800,21600,43200,86400];
  let st=steps.find(s=>end/s<=12)||86400;for(let t=0;t<=end+1e-9;t+=st){const x=xs(t);
  el("line",{x1:x,x2:x,y1:8,y2:H-18,stroke:"#eee"},svg);
  el("text",{x:x,y:H-4,"font-size":11,"text-anchor":"middle",fill:"#666"},svg).textContent=hmm(t);}}
function yaxis(svg,top,H){const y=v=>H-22-(H-34)*v/Math.max(top,1);const step=Math.max(1,Math.ceil(top/4));
  for(let v=0;v<=top;v+=step){el("text",{x:L-6,y:y(v)+4,"font-size":11,"text-anchor":"end",fill:"#666"},svg).textContent=v;
  el("line",{x1:L,x2:L+PW,y1:y(v),y2:y(v),stroke:"#f3f3f3"},svg);}return y;}
function hover(svg,H,row){const line=el("line",{y1:8,y2:H-18,stroke:"#888","stroke-dasharray":"2,2",visibility:"hidden"},svg);
  const rect=el("rect",{x:L,y:0,width:PW,height:H-18,fill:"transparent"},svg);
  rect.addEventListener("mousemove",ev=>{const b=svg.getBoundingClientRect();const t=(ev.clientX-b.left-L)/PW*end;
    let i=0;while(i+1<ts.length&&ts[i+1]<=t)i++;line.setAttribute("x1",xs(ts[i]));line.setAttribute("x2",xs(ts[i]));
    line.setAttribute("visibility","visible");show(ev,"<b>"+hmm(ts[i])+"</b> ("+clock(ts[i])+")<br>"+row(i));});
  rect.addEventListener("mouseleave",()=>{line.setAttribute("visibility","hidden");hide();});}
function marker(svg,shape,x,y,colour){const s=6;
  if(shape==="up")return el("path",{d:`M${x},${y-s}L${x+s},${y+s}L${x-s},${y+s}Z`,fill:colour},svg);
  if(shape==="down")return el("path",{d:`M${x},${y+s}L${x+s},${y-s}L${x-s},${y-s}Z`,fill:colour},svg);
  if(shape==="diamond")return el("path",{d:`M${x},${y-s}L${x+s},${y}L${x},${y+s}L${x-s},${y}Z`,fill:colour},svg);
  return el("path",{d:`M${x-s},${y-s}L${x+s},${y+s}M${x+s},${y-s}L${x-s},${y+s}`,stroke:colour,"stroke-width":3},svg);}
const MARKS=JSON.parse(document.getElementById("marks").textContent);
const BACKOFF=JSON.parse(document.getElementById("backoff-kinds").textContent);
const root=document.getElementById("panels");
const groups=Object.keys(Object.assign({},tl.groups||{},tl.nodes||{})).sort();
for(const g of groups){
  const b=(tl.groups||{})[g]||{}, nodes=(tl.nodes||{})[g]||ts.map(()=>0), unready=(tl.unready||{})[g]||ts.map(()=>0);
  const target=(tl.target||{})[g]||ts.map(()=>null), ready=nodes.map((n,i)=>n-(unready[i]||0));
  const name=b.name?b.name+" ("+g+")":g;
  const peak=Math.max(1,...nodes,...target.filter(v=>v!==null));
  const showMax=b.max_size!==undefined&&b.max_size<=2*peak+2, top=Math.max(peak,showMax?b.max_size:0);
  const div=document.createElement("div");div.className="panel";root.appendChild(div);
  const h=document.createElement("h2");h.textContent=name+(b.max_size!==undefined?`  (min ${b.min_size}, max ${b.max_size})`:"");div.appendChild(h);
  const H=170, svg=el("svg",{width:W,height:H,"data-group":g},null);div.appendChild(svg);
  ticks(svg,H);const y=yaxis(svg,Math.ceil(top*1.15),H);
  for(const d of R.decisions){if(d.group!==g||BACKOFF.indexOf(d.kind)<0)continue;const until=(d.inputs||{}).backoff_until;
    if(until===undefined)continue;const r=el("rect",{x:xs(d.t),y:8,width:Math.max(1,xs(Math.min(until,end))-xs(d.t)),height:H-26,fill:"#d62728","fill-opacity":0.1,class:"backoff"},svg);
    r.addEventListener("mousemove",ev=>show(ev,`<b>back-off</b> ${hmm(d.t)} to ${hmm(until)}<br>${esc(d.reason)}`));r.addEventListener("mouseleave",hide);}
  el("path",{d:area(ready,ready.map(()=>0),y),fill:"#1f77b4","fill-opacity":0.35},svg);
  el("path",{d:area(nodes,ready,y),fill:"#ff9f1c","fill-opacity":0.55},svg);
  el("path",{d:steps(target,y),fill:"none",stroke:"#1f4e8c","stroke-width":1.6,"stroke-dasharray":"6,3"},svg);
  if(b.min_size!==undefined)el("line",{x1:L,x2:L+PW,y1:y(b.min_size),y2:y(b.min_size),stroke:"#999","stroke-dasharray":"1,3"},svg);
  if(showMax)el("line",{x1:L,x2:L+PW,y1:y(b.max_size),y2:y(b.max_size),stroke:"#555","stroke-dasharray":"1,3"},svg);
  hover(svg,H,i=>`ready ${ready[i]}, unready/booting ${unready[i]||0}, target ${target[i]===null?"?":target[i]}`);
  for(const d of R.decisions){if(d.group!==g||!MARKS[d.kind])continue;const [shape,colour]=MARKS[d.kind];
    let i=0;while(i+1<ts.length&&ts[i+1]<=d.t)i++;const v=target[i]!==null?target[i]:nodes[i];
    const m=marker(svg,shape,xs(d.t),y(v),colour);m.setAttribute("class","decision");
    const what=d.kind+(d.delta?` ${d.delta>0?"+":""}${d.delta}`:"")+(d.node?" "+d.node:"");
    m.addEventListener("mousemove",ev=>show(ev,`<b>${esc(what)}</b> at ${hmm(d.t)} (loop ${d.loop})<br>${esc(d.reason)}`));
    m.addEventListener("mouseleave",hide);}
  {let d="",last=null;for(const s of R.ca_targets||[]){const v=s.targets[g];if(v===undefined)continue;const x=xs(Math.max(0,Math.min(s.t,end)));
    d+=last===null?`M${x},${y(v)}`:`H${x}V${y(v)}`;last=v;}
   if(last!==null)el("path",{d:d+`H${xs(end)}`,fill:"none",stroke:"#111","stroke-width":1.2,class:"ca-target"},svg);}
  for(const d of R.ca_decisions||[]){if((d.group&&d.group!==g)||!MARKS[d.kind])continue;const colour=MARKS[d.kind][1];
    const m=el("circle",{cx:xs(d.t),cy:14,r:5,fill:"none",stroke:colour,"stroke-width":2,class:"ca-decision"},svg);
    m.addEventListener("mousemove",ev=>show(ev,`<b>cluster-autoscaler</b> at ${hmm(d.t)}<br>${esc(d.text)}`));
    m.addEventListener("mouseleave",hide);}
}
{const div=document.createElement("div");div.className="panel";root.appendChild(div);
 const h=document.createElement("h2");h.textContent="pending pods, workloads starting and ending";div.appendChild(h);
 const pend=tl.pending||[], H=150, svg=el("svg",{width:W,height:H},null);div.appendChild(svg);
 ticks(svg,H);const y=yaxis(svg,Math.max(1,...pend),H);
 el("path",{d:area(pend,pend.map(()=>0),y),fill:"#d62728","fill-opacity":0.3,stroke:"#d62728"},svg);
 hover(svg,H,i=>`${pend[i]} pending pods`);
 let k=0;for(const w of tl.workloads||[]){const ends=(w.end!==null&&w.end!==undefined)?w.end:w.finished;for(const [t,what] of [[w.start,"starts"],[ends,"ends"]]){
   if(t===null||t===undefined||t>end||(t===0&&what==="starts"))continue;const x=xs(t);
   const g=el("g",{class:"workload"},svg);el("line",{x1:x,x2:x,y1:8,y2:H-18,stroke:"#444","stroke-dasharray":"4,2"},g);
   el("text",{x:x+3,y:18+12*(k++%4),"font-size":11,fill:"#444"},g).textContent=`${w.name} ${what}`;
   g.addEventListener("mousemove",ev=>show(ev,`<b>${esc(w.kind)} ${esc(w.name)}</b> ${what} at ${hmm(t)}`));g.addEventListener("mouseleave",hide);}}}
})();
// The decision table's filters: a text box over every cell, and an action list.
(function(){
"use strict";
const box=document.getElementById("decision-filter"), kind=document.getElementById("decision-kind");
const count=document.getElementById("decision-count"), table=document.getElementById("decisions");
if(!box||!kind||!table)return;
const rows=Array.from(table.tBodies[0].rows);
function apply(){const q=box.value.trim().toLowerCase(), k=kind.value;let shown=0;
  for(const r of rows){const ok=(!k||r.dataset.kind===k)&&(!q||r.textContent.toLowerCase().indexOf(q)>=0);
    r.hidden=!ok;if(ok)shown++;}
  count.textContent=shown+" of "+rows.length;}
box.addEventListener("input",apply);kind.addEventListener("change",apply);
})();
