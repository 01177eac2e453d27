/* Slack mrkdwn → HTML. Handles <@U…>, <#C…|name>, <!here>, <url|text>, *bold*, _italic_, ~strike~,
   `code`, ```blocks```, > quotes, • / - lists, :emoji: and line breaks. Everything is HTML-escaped first. */
(function () {
  "use strict";

  const EMOJI = {
    "+1": "👍", thumbsup: "👍", "-1": "👎", thumbsdown: "👎", eyes: "👀", white_check_mark: "✅",
    heavy_check_mark: "✔️", x: "❌", no_entry: "⛔", no_entry_sign: "🚫", warning: "⚠️", hourglass: "⌛",
    hourglass_flowing_sand: "⏳", tada: "🎉", rocket: "🚀", robot_face: "🤖", thinking_face: "🤔",
    raised_hand: "✋", wave: "👋", lock: "🔒", unlock: "🔓", key: "🔑", bell: "🔔", memo: "📝",
    pencil: "✏️", pencil2: "✏️", moneybag: "💰", money_with_wings: "💸", dollar: "💵", credit_card: "💳",
    question: "❓", grey_question: "❔", exclamation: "❗", information_source: "ℹ️", bulb: "💡",
    arrows_counterclockwise: "🔄", repeat: "🔁", stopwatch: "⏱️", clock3: "🕒", calendar: "📅",
    bust_in_silhouette: "👤", busts_in_silhouette: "👥", gear: "⚙️", wrench: "🔧", hammer_and_wrench: "🛠️",
    mag: "🔍", link: "🔗", page_facing_up: "📄", clipboard: "📋", inbox_tray: "📥", outbox_tray: "📤",
    large_green_circle: "🟢", red_circle: "🔴", large_yellow_circle: "🟡", large_blue_circle: "🔵",
    white_circle: "⚪", black_circle: "⚫", heart: "❤️", fire: "🔥", star: "⭐", sparkles: "✨", zap: "⚡",
    speech_balloon: "💬", point_right: "👉", ok_hand: "👌", pray: "🙏", stop_sign: "🛑", shield: "🛡️",
    hourglass_done: "⌛", arrow_right: "➡️", leftwards_arrow_with_hook: "↩️", hand: "✋", ballot_box_with_check: "☑️",
    alarm_clock: "⏰", heavy_minus_sign: "➖",
  };

  function escapeHtml(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }

  function unescapeSlack(text) {
    return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  function emoji(name) {
    return EMOJI[name] || null;
  }

  // ctx: { users: {id: {name}}, channels: {id: {name}}, me: "U…" }
  function renderToken(inner, ctx) {
    const [target, label] = splitOnce(inner, "|");
    if (target.startsWith("@")) {
      const id = target.slice(1);
      const user = ctx.users && ctx.users[id];
      const name = user ? user.name : (label || id);
      const mine = ctx.me === id ? " me" : "";
      return `<span class="mention${mine}" data-user="${escapeHtml(id)}">@${escapeHtml(name)}</span>`;
    }
    if (target.startsWith("#")) {
      const id = target.slice(1);
      const channel = ctx.channels && ctx.channels[id];
      const name = label || (channel ? channel.name : id);
      return `<span class="mention channel">#${escapeHtml(name)}</span>`;
    }
    if (target.startsWith("!")) {
      const special = target.slice(1);
      if (special.startsWith("date^")) return escapeHtml(slackDate(special, label, ctx));
      if (special.startsWith("subteam^")) return `<span class="mention">${escapeHtml(label || "@group")}</span>`;
      return `<span class="mention broadcast">@${escapeHtml(special)}</span>`;
    }
    const url = target;
    const safe = /^(https?:|mailto:)/i.test(url) ? url : "#";
    return `<a href="${escapeHtml(safe)}" target="_blank" rel="noopener noreferrer">${escapeHtml(label || url)}</a>`;
  }

  // <!date^epoch^format|fallback> as Slack shows it: in the viewer's own zone (their tz, else the browser's)
  function slackDate(special, fallback, ctx) {
    const [, epoch, format] = special.split("^");
    const when = new Date(Number(epoch) * 1000);
    if (!format || Number.isNaN(when.getTime())) return fallback || special;
    const viewer = ctx.users && ctx.me && ctx.users[ctx.me];
    const zone = { timeZone: (viewer && viewer.tz) || undefined };
    const show = (opts) => {
      try { return when.toLocaleString("en-US", { ...opts, ...zone }); } catch (e) { return when.toLocaleString("en-US", opts); }
    };
    const day = (d) => d.toLocaleDateString("en-CA", zone.timeZone ? zone : {});
    const same = (offset) => { const d = new Date(); d.setDate(d.getDate() + offset); return day(d) === day(when); };
    const pretty = (long) => same(0) ? "Today" : same(1) ? "Tomorrow" : same(-1) ? "Yesterday"
      : show(long ? { weekday: "long", month: "long", day: "numeric", year: "numeric" } : { month: "short", day: "numeric", year: "numeric" });
    const parts = {
      date_num: day(when),
      date: show({ month: "long", day: "numeric", year: "numeric" }),
      date_short: show({ month: "short", day: "numeric", year: "numeric" }),
      date_long: show({ weekday: "long", month: "long", day: "numeric", year: "numeric" }),
      date_pretty: pretty(false), date_short_pretty: pretty(false), date_long_pretty: pretty(true),
      time: show({ hour: "numeric", minute: "2-digit" }),
      time_secs: show({ hour: "numeric", minute: "2-digit", second: "2-digit" }),
    };
    return format.replace(/\{(\w+)\}/g, (whole, name) => parts[name] || whole);
  }

  function splitOnce(text, sep) {
    const at = text.indexOf(sep);
    return at < 0 ? [text, ""] : [text.slice(0, at), text.slice(at + 1)];
  }

  function inline(text, ctx) {
    // Protect <…> tokens and `code` spans with placeholders, escape the rest, then apply formatting.
    const slots = [];
    const keep = (html) => `\u0000${slots.push(html) - 1}\u0000`;
    let work = text.replace(/`([^`\n]+)`/g, (_, code) => keep(`<code>${escapeHtml(unescapeSlack(code))}</code>`));
    work = work.replace(/<([^<>\n]+)>/g, (_, inner) => keep(renderToken(inner, ctx)));
    work = escapeHtml(unescapeSlack(work));
    work = work.replace(/(^|[\s(>])\*(?!\s)([^*\n]+?)\*(?=$|[\s.,:;!?)<])/g, "$1<b>$2</b>");
    work = work.replace(/(^|[\s(>])_(?!\s)([^_\n]+?)_(?=$|[\s.,:;!?)<])/g, "$1<i>$2</i>");
    work = work.replace(/(^|[\s(>])~(?!\s)([^~\n]+?)~(?=$|[\s.,:;!?)<])/g, "$1<s>$2</s>");
    work = work.replace(/:([a-z0-9_+\-]+):/g, (whole, name) => emoji(name) || whole);
    work = work.replace(/(^|\s)(https?:\/\/[^\s<]+)/g, (_, pre, url) => `${pre}<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`);
    return work.replace(/\u0000(\d+)\u0000/g, (_, i) => slots[Number(i)]);
  }

  function lines(text, ctx) {
    const out = [];
    let list = null;
    let quote = [];
    const flushQuote = () => {
      if (quote.length) out.push(`<blockquote>${quote.join("<br>")}</blockquote>`);
      quote = [];
    };
    const flushList = () => {
      if (list) out.push(`<ul>${list.map((item) => `<li>${item}</li>`).join("")}</ul>`);
      list = null;
    };
    for (const raw of text.split("\n")) {
      const quoteMatch = raw.match(/^(?:&gt;|>)\s?(.*)$/);
      const listMatch = raw.match(/^\s*(?:•|◦|-|\*)\s+(.*)$/);
      if (quoteMatch) {
        flushList();
        quote.push(inline(quoteMatch[1], ctx));
      } else if (listMatch && !/^\s*\*[^*\s][^*]*\*\s*$/.test(raw)) {
        flushQuote();
        (list = list || []).push(inline(listMatch[1], ctx));
      } else {
        flushQuote();
        flushList();
        out.push(inline(raw, ctx) + "\n");
      }
    }
    flushQuote();
    flushList();
    return out.join("").replace(/\n$/, "").replace(/\n/g, "<br>");
  }

  function mrkdwn(text, ctx) {
    if (!text) return "";
    const parts = String(text).split("```");
    return parts
      .map((part, index) => {
        if (index % 2 === 1) return `<pre class="pre">${escapeHtml(unescapeSlack(part.replace(/^\n/, "")))}</pre>`;
        return lines(part, ctx || {});
      })
      .join("");
  }

  function plain(text, withEmoji) {
    const escaped = escapeHtml(text || "");
    return withEmoji === false ? escaped : escaped.replace(/:([a-z0-9_+\-]+):/g, (w, n) => emoji(n) || w);
  }

  // Standard Markdown (the `markdown` block): a light subset mapped onto the mrkdwn renderer.
  function markdown(text, ctx) {
    const converted = String(text || "")
      .replace(/^#{1,6}\s+(.*)$/gm, "*$1*")
      .replace(/\*\*([^*]+)\*\*/g, "*$1*")
      .replace(/\[([^\]]+)\]\((https?:[^)]+)\)/g, "<$2|$1>");
    return mrkdwn(converted, ctx);
  }

  window.Mrkdwn = { mrkdwn, plain, markdown, escapeHtml, emoji };
})();
