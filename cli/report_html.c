/*
 * The page `ferry report TRACE -o FILE` writes: one HTML file with its style,
 * script and data inside (no network, no font or script from elsewhere). The
 * timeline is drawn on a canvas from the tracks' slices, with back-to-back
 * slices of one stage merged (the page then holds a fraction of the trace's
 * events), and only what is in view drawn, a pixel column at most once per
 * stage: a million events stay responsive. The tables are plain HTML.
 */
#include "cli.h"
#include "report.h"

#include <inttypes.h>
#include <string.h>

/* Back-to-back slices of one stage closer than this (µs) become one. */
#define MERGE_GAP_US 0.5

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* A JSON string that cannot end the script element it sits in. */
static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == '<' || ch == '>' || ch == '&')
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static const char *const colors[RK_COUNT] = {"#4e79a7", "#f28e2b", "#59a14f",
                                             "#b07aa1", "#e15759", "#9c9c9c"};

static const char style[] =
    "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}"
    "h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:20px 0 6px}"
    "table{border-collapse:collapse}td,th{padding:2px 8px;text-align:right;"
    "border-bottom:1px solid #eee}th{background:#f5f5f5}td.l,th.l{text-align:left}"
    "#wrap{position:relative;border:1px solid #ccc}canvas{display:block;cursor:grab}"
    "#tip{position:absolute;pointer-events:none;background:#fff;border:1px solid #999;"
    "padding:3px 6px;display:none;white-space:pre;font-size:12px}"
    ".key{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}"
    ".bar{display:flex;width:300px;height:10px;background:#f5f5f5}.bar div{height:10px}"
    "button{margin-right:4px}a.z{cursor:pointer;color:#06c}.muted{color:#777}";

/* The timeline: D is the data element's JSON (see write_data). When it has
 * drawn, the body says so (data-rendered, data-drawn: the rectangles drawn);
 * an error in the page is put in data-error: what the browser test reads. */
static const char script[] =
    "window.onerror=function(m){document.body.setAttribute('data-error',String(m));};\n"
    "(function(){'use strict';\n"
    "var D=JSON.parse(document.getElementById('data').textContent);\n"
    "var COL=D.colors,NAMES=D.kinds,tracks=D.tracks,queues=D.queues,inst=D.instants;\n"
    "var cv=document.getElementById('tl'),ctx=cv.getContext('2d'),tip=document.getElementById("
    "'tip');\n"
    "var RULER=24,ROW=22,QROW=70,LABEL=140,W=1000,span=D.span>0?D.span:1,v0=0,v1=span;\n"
    "var H=RULER+tracks.length*ROW+queues.length*QROW+8;\n"
    "function size(){W=Math.max(400,cv.parentNode.clientWidth||1000);var r=window."
    "devicePixelRatio||1;"
    "cv.width=Math.round(W*r);cv.height=Math.round(H*r);cv.style.width=W+'px';cv.style.height="
    "H+'px';"
    "ctx.setTransform(r,0,0,r,0,0);}\n"
    "function xOf(t){return LABEL+(t-v0)*(W-LABEL)/(v1-v0);}\n"
    "function tOf(x){return v0+(x-LABEL)*(v1-v0)/(W-LABEL);}\n"
    "function lower(a,v){var lo=0,hi=a.length;while(lo<hi){var m=(lo+hi)>>1;if(a[m]<v)lo=m+1;"
    "else hi=m;}return lo;}\n"
    "function fmt(u){var a=Math.abs(u);if(a>=1e6)return (u/1e6).toFixed(3)+' s';if(a>=1e3)"
    "return (u/1e3).toFixed(3)+' ms';return u.toFixed(3)+' \\u00b5s';}\n"
    "function nice(x){var p=Math.pow(10,Math.floor(Math.log(x)/Math.LN10)),m=x/p;return "
    "(m<1.5?1:m<3.5?2:m<7.5?5:10)*p;}\n"
    "function plot(Q,y0,h){var mx=1,i;for(i=0;i<Q.r.length;i++)mx=Math.max(mx,Q.r[i]+Q.f[i]);\n"
    " for(var px=LABEL;px<W;px++){var a=tOf(px),b=tOf(px+1),j=Math.max(0,lower(Q.t,a)-1),"
    "r=-1,f=0;\n"
    "  for(;j<Q.t.length&&Q.t[j]<b;j++){if(Q.t[j+1]!==undefined&&Q.t[j+1]<a)continue;"
    "if(Q.r[j]>r){r=Q.r[j];f=Q.f[j];}}\n"
    "  if(r<0)continue;var hr=h*r/mx,hf=h*f/mx;ctx.fillStyle='#59a14f';ctx.fillRect(px,y0+h-hr,"
    "1,hr);"
    "ctx.fillStyle='#a0cbe8';ctx.fillRect(px,y0+h-hr-hf,1,hf);}\n"
    " ctx.fillStyle='#777';ctx.fillText('max '+mx,LABEL-40,y0+6);}\n"
    "var pending=false;function redraw(){if(!pending){pending=true;"
    "window.requestAnimationFrame(function(){pending=false;draw();});}}\n"
    "function draw(){var t0=window.performance.now();ctx.clearRect(0,0,W,H);ctx.font='11px "
    "sans-serif';ctx.textBaseline="
    "'middle';\n"
    " var step=nice((v1-v0)/8),t,i,j,n=0;ctx.strokeStyle='#e4e4e4';ctx.fillStyle='#333';\n"
    " for(t=Math.ceil(v0/step)*step;t<=v1;t+=step){var x=xOf(t);ctx.beginPath();"
    "ctx.moveTo(x,RULER-6);ctx.lineTo(x,H);ctx.stroke();ctx.fillText(fmt(t),x+2,9);}\n"
    " ctx.save();ctx.beginPath();ctx.rect(LABEL,0,W-LABEL,H);ctx.clip();\n"
    " for(i=0;i<tracks.length;i++){var tr=tracks[i],y=RULER+i*ROW,lp=-1,lk=-1;\n"
    "  for(j=lower(tr.s,v0-tr.maxd);j<tr.s.length&&tr.s[j]<=v1;j++){var e=tr.s[j]+tr.d[j];"
    "if(e<v0)continue;\n"
    "   var x0=Math.max(xOf(tr.s[j]),LABEL-1),w=xOf(e)-x0,px=Math.floor(x0),k=tr.k[j];\n"
    "   if(w<1){if(px===lp&&k===lk)continue;w=1;}lp=Math.floor(x0+w-1);lk=k;"
    "var hh=k===4?ROW-4:ROW-8;\n"
    "   "
    "ctx.fillStyle=COL[k];ctx.fillRect(px,y+(ROW-hh)/2,Math.max(1,Math.round(x0+w)-px),hh);n++;}}\n"
    " for(i=0;i<inst.t.length;i++){if(inst.t[i]<v0||inst.t[i]>v1)continue;var ix=xOf(inst.t[i]),"
    "iy=RULER+inst.tr[i]*ROW;\n"
    "  ctx.fillStyle=inst.e[i]?'#d00':'#f90';ctx.beginPath();ctx.moveTo(ix,iy+2);"
    "ctx.lineTo(ix-4,iy+ROW-2);ctx.lineTo(ix+4,iy+ROW-2);ctx.fill();}\n"
    " ctx.restore();\n"
    " for(i=0;i<tracks.length;i++){ctx.fillStyle='#222';ctx.fillText(tracks[i].name,4,"
    "RULER+i*ROW+ROW/2);}\n"
    " for(i=0;i<queues.length;i++){var y0=RULER+tracks.length*ROW+i*QROW+4;ctx.fillStyle="
    "'#222';"
    "ctx.fillText(queues[i].name,4,y0+QROW/2);plot(queues[i],y0,QROW-10);}\n"
    " document.getElementById('view').textContent=fmt(v0)+' \\u2013 '+fmt(v1)+' ('+fmt(v1-v0)+"
    "')';\n"
    " document.body.setAttribute('data-drawn',String(n));document.body.setAttribute("
    "'data-rendered','1');document.body.setAttribute('data-draw-ms',"
    "(window.performance.now()-t0).toFixed(1));}\n"
    "function zoom(f,at){var a=at===undefined?(v0+v1)/2:at,w=(v1-v0)*f;if(w<0.01)w=0.01;"
    "if(w>span*1.2)w=span*1.2;\n"
    " v0=a-(a-v0)*w/(v1-v0);v1=v0+w;redraw();}\n"
    "function show(a,b){v0=a;v1=b>a?b:a+1;redraw();}\n"
    "var drag=null;\n"
    "cv.addEventListener('wheel',function(ev){ev.preventDefault();var r=cv.getBoundingClientRect("
    ");\n"
    " zoom(ev.deltaY>0?1.25:0.8,tOf(Math.max(LABEL,ev.clientX-r.left)));},{passive:false});\n"
    "cv.addEventListener('mousedown',function(ev){drag={x:ev.clientX,a:v0,b:v1};cv.style.cursor="
    "'grabbing';});\n"
    "window.addEventListener('mouseup',function(){drag=null;cv.style.cursor='grab';});\n"
    "cv.addEventListener('dblclick',function(){show(0,span);});\n"
    "cv.addEventListener('mouseleave',function(){tip.style.display='none';});\n"
    "cv.addEventListener('mousemove',function(ev){var r=cv.getBoundingClientRect(),x=ev.clientX-"
    "r.left,y=ev.clientY-r.top;\n"
    " if(drag){var d=(ev.clientX-drag.x)*(drag.b-drag.a)/(W-LABEL);v0=drag.a-d;v1=drag.b-d;"
    "redraw();return;}\n"
    " var row=Math.floor((y-RULER)/ROW),text='';\n"
    " if(row>=0&&row<tracks.length&&x>=LABEL){var tr=tracks[row],t=tOf(x),slop=(v1-v0)/(W-LABEL);"
    "\n"
    "  for(var j=lower(tr.s,t+slop)-1;j>=0&&j>=lower(tr.s,t-tr.maxd-slop);j--){if(tr.s[j]+tr.d[j]"
    "+slop>=t){\n"
    "   text=tr.name+': '+NAMES[tr.k[j]]+'\\n'+fmt(tr.d[j])+' from '+fmt(tr.s[j])+"
    "(tr.n[j]>1?'\\n'+tr.n[j]+' slices back to back':'')+(tr.b[j]>=0?'\\nbatch '+tr.b[j]:'');"
    "break;}}}\n"
    " if(text){tip.textContent=text;tip.style.display='block';tip.style.left=(x+12)+'px';"
    "tip.style.top=(y+12)+'px';}else tip.style.display='none';});\n"
    "document.getElementById('zin').onclick=function(){zoom(0.5);};\n"
    "document.getElementById('zout').onclick=function(){zoom(2);};\n"
    "document.getElementById('zreset').onclick=function(){show(0,span);};\n"
    "var links=document.querySelectorAll('a.z');for(var i=0;i<links.length;i++){links[i]."
    "onclick=function(){\n"
    " var a=+this.getAttribute('data-a'),b=+this.getAttribute('data-b'),m=(b-a)*4+1;"
    "show(Math.max(0,a-m),b+m);\n"
    " document.getElementById('wrap').scrollIntoView();};}\n"
    "window.addEventListener('resize',function(){size();redraw();});\n"
    "size();draw();})();\n";

/* The tracks with their slices merged, the queues, the instants. */
static void write_data(const rtrace *t, FILE *f)
{
    fputs("{\"kinds\":[", f);
    for (int k = 0; k < RK_COUNT; k++)
        fprintf(f, "%s\"%s\"", k ? "," : "", report_kind_names[k]);
    fputs("],\"colors\":[", f);
    for (int k = 0; k < RK_COUNT; k++)
        fprintf(f, "%s\"%s\"", k ? "," : "", colors[k]);
    fprintf(f, "],\"span\":%.3f,\"tracks\":[", t->span);
    for (uint32_t i = 0; i < t->ntracks; i++) {
        const rtrack *k = &t->tracks[i];
        const rslice *s = t->slices + k->first;
        /* merge runs: [start, end) of each run */
        size_t nrun = 0;
        static const char *const keys[] = {"s", "d", "k", "b", "n"};
        double maxd = 0;
        fprintf(f, "%s{\"name\":", i ? "," : "");
        jstr(f, k->name);
        for (int pass = 0; pass < 5; pass++) {
            fprintf(f, ",\"%s\":[", keys[pass]);
            nrun = 0;
            for (uint32_t a = 0; a < k->count;) {
                uint32_t b = a + 1;
                double end = s[a].ts + s[a].dur;
                while (b < k->count && s[b].kind == s[a].kind && s[b].ts <= end + MERGE_GAP_US &&
                       s[b].ts >= s[a].ts) {
                    end = s[b].ts + s[b].dur > end ? s[b].ts + s[b].dur : end;
                    b++;
                }
                const char *sep = nrun++ ? "," : "";
                if (pass == 0)
                    fprintf(f, "%s%.3f", sep, s[a].ts);
                else if (pass == 1)
                    fprintf(f, "%s%.3f", sep, end - s[a].ts);
                else if (pass == 2)
                    fprintf(f, "%s%u", sep, s[a].kind);
                else if (pass == 3)
                    fprintf(f, "%s%lld", sep,
                            s[a].batch == UINT64_MAX ? -1LL : (long long)s[a].batch);
                else
                    fprintf(f, "%s%u", sep, b - a);
                if (end - s[a].ts > maxd)
                    maxd = end - s[a].ts;
                a = b;
            }
            fputc(']', f);
        }
        fprintf(f, ",\"maxd\":%.3f}", maxd);
    }
    fputs("],\"queues\":[", f);
    for (size_t a = 0; a < t->ncounters;) {
        size_t b = a;
        while (b < t->ncounters && t->counters[b].pid == t->counters[a].pid)
            b++;
        fprintf(f, "%s{\"name\":\"queue (rank %lld)\",\"t\":[", a ? "," : "",
                (long long)t->counters[a].pid);
        for (size_t i = a; i < b; i++)
            fprintf(f, "%s%.3f", i > a ? "," : "", t->counters[i].ts);
        fputs("],\"r\":[", f);
        for (size_t i = a; i < b; i++)
            fprintf(f, "%s%g", i > a ? "," : "", t->counters[i].ready);
        fputs("],\"f\":[", f);
        for (size_t i = a; i < b; i++)
            fprintf(f, "%s%g", i > a ? "," : "", t->counters[i].flight);
        fputs("]}", f);
        a = b;
    }
    fputs("],\"instants\":{\"t\":[", f);
    for (size_t i = 0; i < t->ninstants; i++)
        fprintf(f, "%s%.3f", i ? "," : "", t->instants[i].ts);
    fputs("],\"tr\":[", f);
    for (size_t i = 0; i < t->ninstants; i++)
        fprintf(f, "%s%u", i ? "," : "", t->instants[i].track);
    fputs("],\"e\":[", f);
    for (size_t i = 0; i < t->ninstants; i++)
        fprintf(f, "%s%d", i ? "," : "", t->instants[i].error);
    fputs("]}}", f);
}

static void ms_cell(FILE *f, double us)
{
    fprintf(f, "<td>%.3f</td>", us / 1000);
}

static void stage_table(const rtrace *t, FILE *f)
{
    fputs("<h2>Stage totals per track (ms)</h2><table><tr><th class=l>track</th><th>busy</th>", f);
    for (int s = 0; s < RK_COUNT; s++)
        fprintf(f, "<th>%s</th>", report_kind_names[s]);
    fputs("<th>samples</th><th class=l>share of the span</th></tr>\n", f);
    for (uint32_t i = 0; i < t->ntracks; i++) {
        const rtrack *k = &t->tracks[i];
        double busy = 0;
        for (int s = 0; s < RK_COUNT; s++)
            busy += s == RK_WAIT ? 0 : k->total[s];
        fputs("<tr><td class=l>", f);
        esc(f, k->name);
        fputs("</td>", f);
        ms_cell(f, busy);
        for (int s = 0; s < RK_COUNT; s++)
            ms_cell(f, k->total[s]);
        fprintf(f, "<td>%" PRIu64 "</td><td class=l><div class=bar>", k->samples);
        for (int s = 0; s < RK_COUNT; s++)
            if (t->span > 0 && k->total[s] > 0)
                fprintf(f, "<div style=\"width:%.2f%%;background:%s\" title=\"%s\"></div>",
                        100 * k->total[s] / t->span, colors[s], report_kind_names[s]);
        fputs("</div></td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void zoom_link(FILE *f, double a, double dur)
{
    fprintf(f, "<td><a class=z data-a=\"%.3f\" data-b=\"%.3f\">%.3f</a></td>", a, a + dur,
            a / 1000);
}

static void waits_table(const rtrace *t, FILE *f)
{
    fprintf(
        f, "<h2>The consumer's waits</h2><p>%" PRIu64 " waits, %.3f ms in all (%.1f%% of the span)",
        t->nwaits, t->wait_total / 1000, t->span > 0 ? 100 * t->wait_total / t->span : 0.0);
    if (t->first_wait >= 0)
        fprintf(f, "; the first lasted %.3f ms, until %.3f ms", t->first_wait / 1000,
                t->first_wait_end / 1000);
    fputs(". Queue: ", f);
    if (t->ncounters)
        fprintf(f, "%.1f batches ready on average, at most %.0f; none ready %.1f%% of the time.",
                t->ready_mean, t->ready_max, 100 * t->empty_frac);
    else
        fputs("not recorded.", f);
    fputs("</p>\n", f);
    if (!t->nwaits_kept)
        return;
    fputs("<table><tr><th>wait (ms)</th><th>at (ms)</th><th>for batch</th></tr>\n", f);
    for (uint32_t i = 0; i < t->nwaits_kept; i++) {
        const rslice *w = &t->waits[i];
        fprintf(f, "<tr><td>%.3f</td>", w->dur / 1000);
        zoom_link(f, w->ts, w->dur);
        if (w->batch == UINT64_MAX)
            fputs("<td>-</td></tr>\n", f);
        else
            fprintf(f, "<td>%" PRIu64 "</td></tr>\n", w->batch);
    }
    fputs("</table>\n", f);
}

static void slowest_table(const rtrace *t, FILE *f)
{
    fputs("<h2>The slowest samples</h2>", f);
    if (!t->nslowest) {
        fputs("<p class=muted>No sample of its own in this trace: samples under 2 &micro;s are "
              "traced a grain (a run of a batch's slots) at a time.</p>\n",
              f);
        return;
    }
    fputs("<table><tr><th>index</th><th>batch</th><th>slot</th><th class=l>track</th>"
          "<th>ms</th><th>at (ms)</th>",
          f);
    for (int s = 0; s < RK_WAIT; s++)
        fprintf(f, "<th>%s</th>", report_kind_names[s]);
    fputs("</tr>\n", f);
    for (uint32_t i = 0; i < t->nslowest; i++) {
        const rsample *s = &t->slowest[i];
        if (s->index == UINT64_MAX)
            fputs("<tr><td>-</td>", f);
        else
            fprintf(f, "<tr><td>%" PRIu64 "</td>", s->index);
        fprintf(f, "<td>%" PRIu64 "</td><td>%d</td><td class=l>", s->batch, s->slot);
        esc(f, t->tracks[s->track].name);
        fprintf(f, "</td><td>%.3f</td>", s->dur / 1000);
        zoom_link(f, s->ts, s->dur);
        for (int k = 0; k < RK_WAIT; k++)
            ms_cell(f, s->stage[k]);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

int report_write_html(const rtrace *t, FILE *f)
{
    fputs("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>ferry report: ", f);
    esc(f, t->path);
    fprintf(f, "</title><style>%s</style></head><body>\n<h1>ferry report: ", style);
    esc(f, t->path);
    fprintf(f,
            "</h1><p class=muted>%" PRIu64 " events, %" PRIu64
            " dropped, %u tracks, %.3f ms. %" PRIu64 " errors, %" PRIu64 " samples skipped.</p>\n",
            t->events, t->dropped, t->ntracks, t->span / 1000, t->nerrors, t->nskips);
    fputs("<h2>Timeline</h2><p>", f);
    for (int k = 0; k < RK_COUNT; k++)
        fprintf(f, "<span class=key style=\"background:%s\"></span>%s", colors[k],
                report_kind_names[k]);
    fputs("<span class=key style=\"background:#59a14f\"></span>batches ready"
          "<span class=key style=\"background:#a0cbe8\"></span>in flight"
          "<span class=key style=\"background:#d00\"></span>error"
          "<span class=key style=\"background:#f90\"></span>skip</p>\n"
          "<p><button id=zin>zoom in</button><button id=zout>zoom out</button>"
          "<button id=zreset>whole run</button> <span id=view class=muted></span> "
          "<span class=muted>(wheel: zoom at the pointer; drag: move; double-click: the whole "
          "run)</span></p>\n"
          "<div id=wrap><canvas id=tl></canvas><div id=tip></div></div>\n",
          f);
    stage_table(t, f);
    waits_table(t, f);
    slowest_table(t, f);
    fputs("<script type=\"application/json\" id=data>", f);
    write_data(t, f);
    fprintf(f, "</script>\n<script>%s</script>\n</body></html>\n", script);
    return ferror(f) ? cli_error(1, "report: writing the page failed") : 0;
}
