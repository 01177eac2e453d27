/* The local Slack client: sidebar, channel, threads, App Home, modals, live updates (SSE → /ui/state). */
(function () {
  "use strict";
  const { mrkdwn, plain, escapeHtml, emoji } = window.Mrkdwn;
  const $ = (id) => document.getElementById(id);

  const ui = {
    me: localStorage.getItem("localslack.as") || "U0ALICE",
    data: null,
    current: decodeURIComponent(location.hash.slice(1)) || null,
    tab: "messages",
    thread: null, // {channel, ts}
    drafts: new Map(),
    modalKey: null,
    homeKey: null,
    sidebarKey: null,
    homeOpened: null,
    refreshing: false,
    again: false,
  };

  // ---- server calls ---------------------------------------------------------------------------------

  async function post(path, body) {
    try {
      const response = await fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ user: ui.me, ...body }),
      });
      const answer = await response.json();
      if (!answer.ok) showBanner(answer.error || "That did not work.");
      else if (answer.problem) showBanner(answer.problem);
      scheduleRefresh();
      return answer;
    } catch (error) {
      showBanner("The local workspace is not reachable — is localslack still running?");
      return { ok: false };
    }
  }

  async function refresh() {
    if (ui.refreshing) { ui.again = true; return; }
    ui.refreshing = true;
    const asked = ui.me;
    try {
      const response = await fetch(`/ui/state?user=${encodeURIComponent(asked)}`, { cache: "no-store" });
      const data = await response.json();
      if (ui.me !== asked) {
        ui.again = true;  // the viewer switched person meanwhile: this answer is for someone else
      } else if (!data.ok) {
        ui.me = "U0ALICE";
        localStorage.removeItem("localslack.as");
        showBanner(data.error || "Unknown user");
      } else {
        ui.data = data;
        ui.me = data.me.id;  // the server falls back to its first person for an unknown one
        render();
      }
    } catch (error) {
      showBanner("The local workspace is not reachable — is localslack still running?");
    } finally {
      ui.refreshing = false;
      if (ui.again) { ui.again = false; refresh(); }
    }
  }

  let refreshTimer = null;
  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 40);
  }

  function connectEvents() {
    if (!window.EventSource) { setInterval(refresh, 2000); return; }
    const source = new EventSource("/ui/events");
    source.addEventListener("change", scheduleRefresh);
    source.onerror = () => {
      source.close();
      setTimeout(() => { refresh(); connectEvents(); }, 2000);
    };
  }

  // ---- banner and confirm dialog --------------------------------------------------------------------

  let bannerTimer = null;
  function showBanner(text) {
    $("banner-text").textContent = text;
    $("banner").hidden = false;
    clearTimeout(bannerTimer);
    bannerTimer = setTimeout(() => { $("banner").hidden = true; }, 10000);
  }
  $("banner").querySelector(".banner-close").addEventListener("click", () => { $("banner").hidden = true; });

  function confirmDialog(confirm) {
    return new Promise((resolve) => {
      const layer = $("confirm-layer");
      const danger = confirm.style === "danger" ? "danger" : "primary";
      layer.innerHTML = `
        <div class="modal confirm" role="dialog" aria-modal="true">
          <div class="modal-head"><div class="modal-title">${plain(confirm.title ? confirm.title.text : "Are you sure?")}</div></div>
          <div class="modal-body"><div class="bk-text">${BlockKit.textHtml(confirm.text, blockContext({}))}</div></div>
          <div class="modal-foot">
            <button type="button" class="btn" data-answer="no">${plain(confirm.deny ? confirm.deny.text : "Cancel")}</button>
            <button type="button" class="btn ${danger}" data-answer="yes">${plain(confirm.confirm ? confirm.confirm.text : "Yes")}</button>
          </div>
        </div>`;
      layer.hidden = false;
      const finish = (answer) => { layer.hidden = true; layer.innerHTML = ""; document.removeEventListener("keydown", onKey); resolve(answer); };
      const onKey = (event) => { if (event.key === "Escape") finish(false); };
      document.addEventListener("keydown", onKey);
      layer.querySelectorAll("button").forEach((b) => b.addEventListener("click", () => finish(b.dataset.answer === "yes")));
      layer.querySelector('[data-answer="yes"]').focus();
    });
  }

  // ---- helpers --------------------------------------------------------------------------------------

  function person(id) {
    if (id === "USLACKBOT") return { id, name: "Slackbot", real_name: "Slackbot", avatar: "/ui/avatar/USLACKBOT.svg", is_bot: true };
    return (ui.data && ui.data.users[id]) || { id, name: id, real_name: id, avatar: `/ui/avatar/${id}.svg` };
  }

  function mctx() {
    const channels = {};
    for (const c of ui.data ? ui.data.channels : []) channels[c.id] = c;
    return { users: ui.data ? ui.data.users : {}, channels, me: ui.me };
  }

  function blockContext(surface, errors) {
    return {
      mctx: mctx(),
      people: ui.data ? ui.data.people : [],
      channelList: ui.data ? ui.data.channels : [],
      surface,
      errors: errors || {},
      drafts: ui.drafts,
      isView: Boolean(surface.view_id),
      confirm: confirmDialog,
      send: (kind, body) => post(`/ui/${kind}`, { ...surface, ...body }),
    };
  }

  function clock(ts) {
    const date = new Date(parseFloat(ts) * 1000);
    return date.toLocaleTimeString([], { hour: "numeric", minute: "2-digit" });
  }

  function channelById(id) {
    return ui.data.channels.find((c) => c.id === id);
  }

  function isDm(id) {
    return ui.data && ui.data.bot.dm === id;
  }

  // ---- rendering ------------------------------------------------------------------------------------

  function render() {
    const data = ui.data;
    if (!ui.current || !channelById(ui.current)) ui.current = (data.channels.find((c) => c.id === "C0GENERAL") || data.channels[0]).id;
    if (!isDm(ui.current)) ui.tab = "messages";
    // the agent's pane (an assistant thread in the app's DM) stays open beside any channel, as in Slack
    if (ui.thread && !ui.thread.assistant && ui.thread.channel !== ui.current) ui.thread = null;
    document.title = `${data.team.name} — Slack`;
    renderTop();
    renderSidebar();
    renderConversation();
    renderThread();
    renderModal();
  }

  function renderTop() {
    const data = ui.data;
    $("search-team").textContent = data.team.name;
    const switcher = $("user-switcher");
    const options = data.people.map((p) => {
      const role = p.external ? ` (external · ${p.team_name})` : p.is_admin ? " (admin)" : p.title ? ` (${p.title.toLowerCase()})` : "";
      return `<option value="${escapeHtml(p.id)}">${escapeHtml(p.name + role)}</option>`;
    }).join("");
    if (switcher.dataset.options !== options) { switcher.innerHTML = options; switcher.dataset.options = options; }
    switcher.value = ui.me;
    $("me-avatar").src = data.me.avatar;
    const status = $("bot-status");
    const last = data.last_delivery;
    const reachable = data.bot_url || data.socket_connected;
    const failing = !reachable || (last && !last.ok);
    status.className = `bot-status ${failing ? "bad" : "good"}`;
    status.textContent = failing ? "agent not answering" : "agent connected";
    const via = data.socket_connected ? "Delivering over Socket Mode" : `Delivering to ${data.bot_url}`;
    status.title = failing ? (last && last.problem) || "No bot URL configured and no Socket Mode connection" : via;
  }

  function navItem(label, icon, active, onClick, extra) {
    const item = document.createElement("li");
    item.className = `nav-item${active ? " active" : ""}`;
    item.innerHTML = `<span class="nav-icon">${icon}</span><span class="nav-label">${label}</span>${extra || ""}`;
    item.addEventListener("click", onClick);
    return item;
  }

  function renderSidebar() {
    const data = ui.data;
    // drawn again only when it changed: a redraw would detach the item under a person's pointer
    const key = JSON.stringify([data.team, data.channels, data.bot, person(data.bot.id), ui.current, ui.tab, ui.me]);
    if (key === ui.sidebarKey) return;
    ui.sidebarKey = key;
    $("team-name").textContent = data.team.name;
    $("team-icon").src = data.team.icon;
    const channels = $("nav-channels");
    channels.innerHTML = "";
    for (const c of data.channels.filter((c) => !c.is_im)) {
      const shared = c.is_ext_shared ? '<span class="nav-shared" title="Shared with another organisation (Slack Connect)">⇄</span>' : "";
      channels.appendChild(navItem(escapeHtml(c.name), "#", ui.current === c.id, () => go(c.id, "messages"), shared));
    }
    const dms = $("nav-dms");
    dms.innerHTML = "";
    const bot = person(data.bot.id);
    dms.appendChild(navItem(`agent <span class="app-badge">APP</span>`, `<img class="avatar xxs" src="${escapeHtml(bot.avatar)}" alt="">`,
      ui.current === data.bot.dm && ui.tab === "messages", () => go(data.bot.dm, "messages")));
    const apps = $("nav-apps");
    apps.innerHTML = "";
    apps.appendChild(navItem("agent · Home", "⌂", ui.current === data.bot.dm && ui.tab === "home", () => go(data.bot.dm, "home")));
  }

  function go(channelId, tab) {
    ui.current = channelId;
    ui.tab = tab;
    if (!ui.thread || (!ui.thread.assistant && ui.thread.channel !== channelId)) ui.thread = null;
    if (ui.thread && ui.thread.assistant && !isDm(channelId)) { // the pane is open: the app learns where we look
      post("/ui/assistant_context", { dm: ui.thread.channel, ts: ui.thread.ts, channel: channelId });
    }
    history.replaceState(null, "", `#${encodeURIComponent(channelId)}`);
    render();
    if (tab !== "home") $("composer-input").focus();
  }

  function renderConversation() {
    const data = ui.data;
    const channel = channelById(ui.current);
    const dm = channel.is_im;
    $("conv-name").innerHTML = dm ? `<img class="avatar xs" src="${escapeHtml(person(data.bot.id).avatar)}" alt=""> agent <span class="app-badge">APP</span>` : `# ${escapeHtml(channel.name)}`;
    const badge = $("conv-badge");
    badge.hidden = !channel.is_ext_shared;
    badge.textContent = channel.is_ext_shared ? "Slack Connect" : "";
    $("conv-topic").innerHTML = dm ? "Your AI agent. Ask it anything — it asks people before it does anything risky." : `${channel.members} members · ${mrkdwn(channel.topic || "", mctx())}`;
    const tabs = $("conv-tabs");
    tabs.hidden = !dm;
    tabs.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.dataset.tab === ui.tab));
    const home = ui.tab === "home";
    $("messages").hidden = home;
    $("composer").hidden = home;
    $("home").hidden = !home;
    if (home) {
      renderHome();
      return;
    }
    ui.homeOpened = null;
    $("composer").hidden = ui.tab === "history";
    if (ui.tab === "history") {
      renderHistory(channel);
      return;
    }
    $("composer-input").placeholder = dm ? "Message agent" : `Message #${channel.name}`;
    const list = $("messages");
    const nearBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
    // assistant chats (the split view's threads) live in the agent's pane, not in the DM's Messages; a
    // thread that is only an agent session (an @mention in a channel) stays where it was asked
    const messages = (data.messages[channel.id] || []).filter((m) => (!m.is_reply || m.subtype === "thread_broadcast")
      && m.subtype !== "assistant_app_thread");
    const ephemerals = data.ephemerals.filter((e) => e.channel === channel.id && !e.thread_ts);
    const items = [...messages, ...ephemerals.map((e) => ({ ...e, ephemeral: true }))].sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts));
    const scrollTop = list.scrollTop;
    const entries = items.length ? [] : [{ key: ["empty", channel], make: () => emptyChannel(channel) }];
    let previous = null;
    for (const item of items) {
      entries.push(messageEntry(item, { inThread: false, compact: compactAfter(previous, item) }));
      previous = item;
    }
    drawList(list, entries);
    list.scrollTop = nearBottom || list.dataset.channel !== channel.id ? list.scrollHeight : scrollTop;
    list.dataset.channel = channel.id;
  }

  // The DM's History tab (as in Slack): the agent chats opened with ✦ Agent, newest first; one opens the pane.
  function renderHistory(channel) {
    const list = $("messages");
    list.innerHTML = "";
    list.dataset.channel = "";
    const chats = (ui.data.messages[channel.id] || []).filter((m) => m.subtype === "assistant_app_thread").reverse();
    if (!chats.length) {
      list.appendChild(Object.assign(document.createElement("div"), { className: "empty", textContent: "No chats with the agent yet: open one with ✦ Agent." }));
    }
    for (const chat of chats) {
      const state = (ui.data.assistant || {})[`${channel.id}:${chat.ts}`] || {};
      const item = document.createElement("button");
      item.type = "button";
      item.className = "history-item";
      item.innerHTML = `<b>${escapeHtml(state.title || "New chat")}</b><span>${escapeHtml(clock(chat.ts))} · ${chat.reply_count || 0} ${chat.reply_count === 1 ? "reply" : "replies"}</span>`;
      item.addEventListener("click", () => { ui.thread = { channel: channel.id, ts: chat.ts, assistant: true }; renderThread(); });
      list.appendChild(item);
    }
  }

  function emptyChannel(channel) {
    const node = document.createElement("div");
    node.className = "empty";
    node.innerHTML = channel.is_im
      ? `<h2>This is the very beginning of your direct message history with <b>agent</b>.</h2><p>Ask it something, e.g. <i>refund charge ch_123 for $40</i>.</p>`
      : `<h2>This is the very beginning of <b>#${escapeHtml(channel.name)}</b></h2><p>Try <i>@agent refund charge ch_123 for $40</i> — the agent will ask an approver before it runs anything risky.</p>`;
    return node;
  }

  function compactAfter(previous, item) {
    if (!previous || previous.ephemeral || item.ephemeral) return false;
    if (previous.user !== item.user || previous.reply_count || previous.subtype === "tombstone") return false;
    return parseFloat(item.ts) - parseFloat(previous.ts) < 300;
  }

  // A list (a channel's messages, a thread) is drawn again entry by entry: a node whose entry did not change
  // stays in place, untouched. Redrawn whole on every change in the workspace (a message anywhere, a status),
  // it detached the node under a person's pointer (a click pressed on one node and released on its
  // replacement is lost) and every element a browser test held.
  const nodeKeys = new WeakMap();

  function drawList(list, entries) {
    const keyed = entries.map((entry) => ({ ...entry, key: JSON.stringify(entry.key) }));
    const wanted = new Set(keyed.map((entry) => entry.key));
    const kept = new Map();
    for (const child of [...list.children]) {
      const key = nodeKeys.get(child);
      if (key !== undefined && wanted.has(key) && !kept.has(key)) kept.set(key, child);
      else child.remove();
    }
    let cursor = list.firstChild;
    for (const { key, make } of keyed) {
      let node = kept.get(key);
      kept.delete(key);  // (an entry drawn twice gets a node of its own)
      if (node && node === cursor) {
        cursor = cursor.nextSibling;
        continue;
      }
      if (!node) {
        node = make();
        nodeKeys.set(node, key);
      }
      list.insertBefore(node, cursor);
    }
  }

  // what a message's node shows depends on the message, where it is drawn, and who is looking at which people
  // and channels (names, avatars, mentions)
  function messageEntry(m, options) {
    const data = ui.data;
    return { key: ["msg", m, options, ui.me, data.users, data.channels], make: () => messageNode(m, options) };
  }

  function messageNode(m, options) {
    const node = document.createElement("div");
    node.className = `msg${m.ephemeral ? " ephemeral" : ""}${options.compact ? " compact" : ""}`;
    node.dataset.ts = m.ts;
    const author = m.ephemeral && m.user === "USLACKBOT" ? person("USLACKBOT") : person(m.user);
    const isBot = Boolean(m.bot_id) || author.is_bot;
    const gutter = options.compact
      ? `<div class="msg-gutter"><span class="msg-time-hover">${clock(m.ts)}</span></div>`
      : `<div class="msg-gutter"><img class="avatar" src="${escapeHtml(author.avatar)}" alt=""></div>`;
    const badges = (isBot ? '<span class="app-badge">APP</span>' : "") +
      (author.external ? `<span class="ext-badge" title="${escapeHtml(author.team_name || "")}">${escapeHtml(author.team_name || "external")}</span>` : "");
    const head = options.compact ? "" :
      `<div class="msg-head"><span class="msg-author">${escapeHtml(author.real_name || author.name)}</span>${badges}<span class="msg-time" title="${new Date(parseFloat(m.ts) * 1000).toLocaleString()}">${clock(m.ts)}</span></div>`;
    const eph = m.ephemeral ? `<div class="eph-note">👁 Only visible to you <button class="link dismiss" type="button">Dismiss</button></div>` : "";
    node.innerHTML = `${gutter}<div class="msg-main">${eph}${head}<div class="msg-body"></div></div>`;
    const body = node.querySelector(".msg-body");
    if (m.subtype === "tombstone") {
      body.innerHTML = `<span class="tombstone">This message was deleted.</span>`;
    } else if (m.streaming) {  // chat.startStream: the text grows as the agent writes it
      const shown = (m.stream_blocks || []).filter((b) => b.type !== "markdown");
      body.appendChild(BlockKit.render([...shown, { type: "markdown", text: m.text || " " }], blockContext({ channel: m.channel, ts: m.ts })));
      body.firstChild.classList.add("streaming");
    } else if (isBot && m.blocks && m.blocks.length) {
      body.appendChild(BlockKit.render(m.blocks, blockContext({ channel: m.channel, ts: m.ts })));
    } else {
      body.innerHTML = `<div class="bk-text">${mrkdwn(m.text, mctx())}</div>`;
    }
    for (const attachment of m.attachments || []) body.appendChild(attachmentNode(attachment, m));
    if (m.edited) body.insertAdjacentHTML("beforeend", '<span class="edited">(edited)</span>');
    if (m.reactions && m.reactions.length) body.appendChild(reactionsNode(m));
    if (!options.inThread && m.reply_count) body.appendChild(threadSummary(m));
    if (m.ephemeral) {
      node.querySelector(".dismiss").addEventListener("click", () => post("/ui/dismiss", { channel: m.channel, ts: m.ts }));
    } else if (m.subtype !== "tombstone") {
      node.appendChild(hoverBar(m, options));
    }
    return node;
  }

  function attachmentNode(attachment, m) {
    const node = document.createElement("div");
    node.className = "attachment";
    node.style.borderLeftColor = attachment.color ? (attachment.color.startsWith("#") ? attachment.color : `#${attachment.color}`) : "#ddd";
    let html = "";
    if (attachment.title) html += `<div class="att-title">${plain(attachment.title)}</div>`;
    if (attachment.text) html += `<div class="bk-text">${mrkdwn(attachment.text, mctx())}</div>`;
    for (const field of attachment.fields || []) html += `<div class="bk-field"><b>${plain(field.title)}</b><br>${mrkdwn(field.value, mctx())}</div>`;
    node.innerHTML = html;
    if (attachment.blocks) node.appendChild(BlockKit.render(attachment.blocks, blockContext({ channel: m.channel, ts: m.ts })));
    return node;
  }

  function reactionsNode(m) {
    const wrap = document.createElement("div");
    wrap.className = "reactions";
    for (const reaction of m.reactions) {
      const mine = reaction.users.includes(ui.me);
      const pill = document.createElement("button");
      pill.type = "button";
      pill.className = `reaction${mine ? " mine" : ""}`;
      pill.title = reaction.users.map((u) => person(u).name).join(", ");
      pill.innerHTML = `${emoji(reaction.name) || `:${escapeHtml(reaction.name)}:`} <span>${reaction.count}</span>`;
      pill.addEventListener("click", () => post("/ui/react", { channel: m.channel, ts: m.ts, name: reaction.name }));
      wrap.appendChild(pill);
    }
    return wrap;
  }

  function threadSummary(m) {
    const node = document.createElement("button");
    node.type = "button";
    node.className = "thread-summary";
    const faces = (m.reply_users || []).slice(0, 4).map((u) => `<img class="avatar xxs" src="${escapeHtml(person(u).avatar)}" alt="">`).join("");
    node.innerHTML = `${faces}<span class="replies">${m.reply_count} ${m.reply_count === 1 ? "reply" : "replies"}</span><span class="last-reply">Last reply ${m.latest_reply ? clock(m.latest_reply) : ""}</span>`;
    node.addEventListener("click", () => openThread(m.channel, m.ts));
    return node;
  }

  function hoverBar(m, options) {
    const bar = document.createElement("div");
    bar.className = "hover-bar";
    for (const name of ["white_check_mark", "eyes"]) {
      const react = document.createElement("button");
      react.type = "button";
      react.title = `React with :${name}:`;
      react.textContent = emoji(name);
      react.addEventListener("click", () => post("/ui/react", { channel: m.channel, ts: m.ts, name }));
      bar.appendChild(react);
    }
    if (!options.inThread) {
      const reply = document.createElement("button");
      reply.type = "button";
      reply.title = "Reply in thread";
      reply.textContent = "💬";
      reply.addEventListener("click", () => openThread(m.channel, m.ts));
      bar.appendChild(reply);
    }
    return bar;
  }

  function openThread(channel, ts) {
    ui.thread = { channel, ts };
    renderThread();
    $("thread-input").focus();
  }

  function renderThread() {
    const pane = $("thread");
    if (!ui.thread || !ui.data) { pane.hidden = true; return; }
    const { channel, ts } = ui.thread;
    const messages = ui.data.messages[channel] || [];
    const root = messages.find((m) => m.ts === ts);
    if (!root) { ui.thread = null; pane.hidden = true; return; }
    pane.hidden = false;
    const info = channelById(channel);
    $("thread-channel").textContent = info.is_im ? "agent" : `#${info.name}`;
    const list = $("thread-messages");
    const nearBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
    const replies = messages.filter((m) => m.is_reply && m.thread_ts === ts);
    const ephemerals = ui.data.ephemerals.filter((e) => e.channel === channel && e.thread_ts === ts).map((e) => ({ ...e, ephemeral: true }));
    const items = [...replies, ...ephemerals].sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts));
    const keep = list.scrollTop;
    const entries = [messageEntry(root, { inThread: true }), { key: ["divider", root.reply_count], make: () => {
      const divider = document.createElement("div");
      divider.className = "reply-divider";
      divider.innerHTML = `<span>${root.reply_count || 0} ${root.reply_count === 1 ? "reply" : "replies"}</span>`;
      return divider;
    } }];
    let previous = null;
    for (const item of items) {
      entries.push(messageEntry(item, { inThread: true, compact: compactAfter(previous, item) }));
      previous = item;
    }
    drawList(list, entries);
    list.scrollTop = nearBottom || list.dataset.thread !== ts ? list.scrollHeight : keep;
    list.dataset.thread = ts;
    renderAssistant(channel, ts, replies);
  }

  // The AI split view's extras: the thread's title, Slack's live status under it ("agent is working on
  // it…" with rotating loading messages), and suggested prompts until the person has asked something.
  let loadingTimer = null;
  function renderAssistant(channel, ts, replies) {
    const state = (ui.data.assistant || {})[`${channel}:${ts}`] || null;
    $("thread-title").textContent = state && (state.title || state.session_title) ? (state.title || state.session_title) : "Thread";  // the split view's own title first
    const status = $("thread-status");
    clearInterval(loadingTimer);
    status.hidden = !(state && (state.status || state.session_status));
    // an agent session: its status, and Slack's stop button while it is processing
    const addStop = () => {
      if (!(state && state.session_status === "processing")) return;
      const stop = Object.assign(document.createElement("button"), { type: "button", className: "agent-stop", textContent: "■ Stop" });
      stop.addEventListener("click", () => post("/ui/stop", { channel, ts }));
      status.appendChild(stop);
    };
    if (state && state.session_status && !state.status) {
      status.innerHTML = `<b>agent</b> session ${escapeHtml(state.session_status)} `;
      addStop();
    }
    if (state && state.status) {
      const loading = state.loading_messages.length ? state.loading_messages : [""];
      let turn = 0;
      const show = () => {
        status.innerHTML = `<span class="assistant-dots"><i></i><i></i><i></i></span> <b>agent</b> ${escapeHtml(state.status)} <span class="assistant-loading">${escapeHtml(loading[turn % loading.length])}</span>`;
        addStop();
        turn += 1;
      };
      show();
      if (loading.length > 1) loadingTimer = setInterval(show, 2000);
    }
    const prompts = $("thread-prompts");
    const asked = replies.some((m) => m.user === ui.me);
    prompts.hidden = !(state && state.prompts.length && !asked);
    prompts.innerHTML = "";
    if (prompts.hidden) return;
    prompts.appendChild(Object.assign(document.createElement("div"), { className: "assistant-prompts-title", textContent: state.prompts_title || "Suggested" }));
    for (const prompt of state.prompts) {
      const chip = document.createElement("button");
      chip.type = "button";
      chip.className = "assistant-prompt";
      chip.textContent = prompt.title;
      chip.title = prompt.message;
      chip.addEventListener("click", () => post("/ui/post", { channel, thread_ts: ts, text: prompt.message }));
      prompts.appendChild(chip);
    }
  }

  $("open-assistant").addEventListener("click", async () => {
    const answer = await post("/ui/assistant", { channel: ui.current });
    if (!answer.ok || !answer.channel) return;
    ui.thread = { channel: answer.channel, ts: answer.ts, assistant: true }; // beside the channel, not instead
    await refresh();
    $("thread-input").focus();
  });

  function renderHome() {
    const pane = $("home");
    const data = ui.data;
    if (ui.homeOpened !== ui.me) {
      ui.homeOpened = ui.me;
      ui.homeKey = null;
      post("/ui/home", {}); // Slack sends app_home_opened every time the tab is opened
    }
    const home = data.home;
    const key = home ? `${ui.me}|${home.id}|${home.hash}` : `${ui.me}|none`;
    if (key === ui.homeKey) return;
    ui.homeKey = key;
    pane.innerHTML = "";
    if (!home) {
      pane.innerHTML = `<div class="empty"><h2>agent's Home tab</h2><p>The app has not published a Home tab for you yet (it receives <code>app_home_opened</code> now).</p></div>`;
      return;
    }
    pane.appendChild(BlockKit.render(home.blocks, blockContext({ view_id: home.id })));
  }

  function renderModal() {
    const layer = $("modal-layer");
    const stack = ui.data.modals || [];
    const top = stack[stack.length - 1];
    const key = top ? JSON.stringify([ui.me, top.id, top.hash, top.errors, stack.length]) : null;
    if (key === ui.modalKey) return;
    ui.modalKey = key;
    if (!top) { layer.hidden = true; layer.innerHTML = ""; return; }
    layer.hidden = false;
    layer.innerHTML = "";
    const modal = document.createElement("form");
    modal.className = "modal";
    modal.setAttribute("role", "dialog");
    modal.setAttribute("aria-modal", "true");
    const back = stack.length > 1 ? '<button type="button" class="icon-btn back" aria-label="Back">‹</button>' : "";
    modal.innerHTML = `
      <div class="modal-head">${back}<img class="avatar xs" src="${escapeHtml(person(ui.data.bot.id).avatar)}" alt="">
        <div class="modal-title">${plain(top.title ? top.title.text : "")}</div>
        <button type="button" class="icon-btn close" aria-label="Close">×</button></div>
      <div class="modal-body"></div>
      <div class="modal-foot">
        <button type="button" class="btn cancel">${plain(top.close ? top.close.text : "Cancel")}</button>
        ${top.submit ? `<button type="submit" class="btn primary">${plain(top.submit.text)}</button>` : ""}
      </div>`;
    const body = modal.querySelector(".modal-body");
    body.appendChild(BlockKit.render(top.blocks, blockContext({ view_id: top.id }, top.errors)));
    const close = () => post("/ui/close", { view_id: top.id });
    modal.querySelectorAll(".close, .cancel, .back").forEach((b) => b.addEventListener("click", close));
    modal.addEventListener("submit", async (event) => {
      event.preventDefault();
      const values = BlockKit.collectInputs(body);
      if (!clientChecksPass(top, values, body)) return; // Slack's client checks these itself
      const submit = modal.querySelector('button[type="submit"]');
      if (submit) submit.disabled = true;
      await post("/ui/submit", { view_id: top.id, values });
      if (submit) submit.disabled = false;
    });
    if (!top.submit) modal.querySelector(".cancel").textContent = top.close ? top.close.text : "Close";
    layer.appendChild(modal);
    const first = body.querySelector("input, textarea, select");
    if (first) first.focus();
  }

  // What Slack's client checks before it sends view_submission: required inputs, and a plain_text_input's
  // min_length ("If the user provides less, they will receive an error").
  function clientChecksPass(view, values, body) {
    let ok = true;
    for (const block of view.blocks || []) {
      if (block.type !== "input" || !block.element) continue;
      const node = body.querySelector(`.bk-input-block[data-block="${CSS.escape(block.block_id || "")}"]`);
      if (!node) continue;
      const old = node.querySelector(".bk-error.required");
      if (old) old.remove();
      const problem = clientProblem(block, (values[block.block_id] || {})[block.element.action_id]);
      if (problem) {
        ok = false;
        node.classList.add("has-error");
        node.insertAdjacentHTML("beforeend", `<div class="bk-error required">⚠ ${escapeHtml(problem)}</div>`);
      }
    }
    return ok;
  }

  function clientProblem(block, value) {
    const empty = value === null || value === undefined || value === "" || (Array.isArray(value) && !value.length);
    if (empty) return block.optional ? null : "Please complete this required field.";
    const least = block.element.type === "plain_text_input" ? block.element.min_length : 0;
    if (least && typeof value === "string" && [...value].length < least) {
      return `Please enter at least ${least} characters.`;
    }
    return null;
  }

  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !$("confirm-layer").hidden) return;
    const stack = ui.data ? ui.data.modals || [] : [];
    if (stack.length) post("/ui/close", { view_id: stack[stack.length - 1].id });
  });

  // ---- composers ------------------------------------------------------------------------------------

  function wireComposer(form, input, target) {
    const grow = () => { input.style.height = "auto"; input.style.height = `${Math.min(input.scrollHeight, 200)}px`; };
    input.addEventListener("input", () => { grow(); mentionMenu(input); });
    input.addEventListener("keydown", (event) => {
      const menu = $("mention-menu");
      if (!menu.hidden && menu.dataset.for === input.id && (event.key === "Tab" || event.key === "Enter")) {
        const first = menu.querySelector("button");
        if (first) { event.preventDefault(); first.click(); return; }
      }
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
      if (event.key === "Escape") menu.hidden = true;
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      input.value = "";
      grow();
      $("mention-menu").hidden = true;
      const where = target();
      const answer = await post("/ui/post", { channel: where.channel, thread_ts: where.thread_ts, text });
      if (!answer.ok && !input.value) { input.value = text; grow(); }
    });
  }

  function mentionMenu(input) {
    const menu = $("mention-menu");
    const before = input.value.slice(0, input.selectionStart);
    const match = before.match(/(^|\s)@([a-z0-9._-]*)$/i);
    if (!match || !ui.data) { menu.hidden = true; return; }
    const query = match[2].toLowerCase();
    const candidates = Object.values(ui.data.users).filter((u) => u.name.toLowerCase().startsWith(query)).slice(0, 6);
    if (!candidates.length) { menu.hidden = true; return; }
    menu.innerHTML = "";
    menu.dataset.for = input.id;
    for (const user of candidates) {
      const item = document.createElement("button");
      item.type = "button";
      item.innerHTML = `<img class="avatar xxs" src="${escapeHtml(user.avatar)}" alt=""><b>${escapeHtml(user.name)}</b> <span>${escapeHtml(user.real_name)}</span>${user.is_bot ? ' <span class="app-badge">APP</span>' : ""}`;
      item.addEventListener("click", () => {
        const start = before.length - match[2].length;
        input.value = `${input.value.slice(0, start)}${user.name} ${input.value.slice(input.selectionStart)}`;
        menu.hidden = true;
        input.focus();
      });
      menu.appendChild(item);
    }
    const box = input.closest(".composer-box");
    box.appendChild(menu);
    menu.hidden = false;
  }

  wireComposer($("composer"), $("composer-input"), () => ({ channel: ui.current }));
  wireComposer($("thread-composer"), $("thread-input"), () => ({ channel: ui.thread.channel, thread_ts: ui.thread.ts }));
  $("thread-close").addEventListener("click", () => { ui.thread = null; renderThread(); });
  $("conv-tabs").querySelectorAll(".tab").forEach((tab) => tab.addEventListener("click", () => go(ui.current, tab.dataset.tab)));
  $("user-switcher").addEventListener("change", (event) => {
    ui.me = event.target.value;
    localStorage.setItem("localslack.as", ui.me);
    ui.thread = null;
    ui.modalKey = null;
    ui.homeKey = null;
    ui.homeOpened = null;
    refresh();
  });

  refresh();
  connectEvents();
})();
