/* Block Kit → DOM. Renders the blocks bots use (section, header, divider, context, actions, input, image,
   rich_text, markdown) and their elements (buttons with confirm dialogs, selects, radio buttons, checkboxes,
   user pickers, text inputs, date/time pickers, overflow menus). Unknown types become a grey
   "[unsupported …]" box instead of breaking the page. */
(function () {
  "use strict";
  const { mrkdwn, plain, markdown, escapeHtml, emoji } = window.Mrkdwn;

  function el(tag, className, html) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (html !== undefined) node.innerHTML = html;
    return node;
  }

  function textHtml(obj, ctx) {
    if (!obj) return "";
    if (typeof obj === "string") return plain(obj);
    if (obj.type === "mrkdwn") return mrkdwn(obj.text, ctx.mctx);
    return plain(obj.text, obj.emoji).replace(/\n/g, "<br>");
  }

  function unsupported(kind, type) {
    return el("div", "bk-unsupported", `[unsupported ${kind}: ${escapeHtml(type || "?")}]`);
  }

  function draftKey(ctx, blockId, actionId) {
    const where = ctx.surface.view_id || `${ctx.surface.channel}/${ctx.surface.ts}`;
    return `${where}|${blockId}|${actionId}`;
  }

  function allOptions(element) {
    const options = [...(element.options || [])];
    for (const group of element.option_groups || []) options.push(...(group.options || []));
    return options;
  }

  // ---- elements -------------------------------------------------------------------------------------

  function button(element, block, ctx) {
    const node = el("button", `bk-button ${element.style || ""}`.trim(), textHtml(element.text, ctx));
    node.type = "button";
    if (element.accessibility_label) node.setAttribute("aria-label", element.accessibility_label);
    node.addEventListener("click", async () => {
      if (element.confirm && !(await ctx.confirm(element.confirm))) return;
      if (element.url) window.open(element.url, "_blank", "noopener");
      node.disabled = true;
      node.classList.add("busy");
      try {
        await ctx.send("click", { block_id: block.block_id, action_id: element.action_id, value: element.value });
      } finally {
        node.disabled = false;
        node.classList.remove("busy");
      }
    });
    return node;
  }

  // Slack's feedback buttons (thumbs up / down under AI answers): a click is a block_actions with the
  // chosen button's value; the chosen thumb stays lit.
  function feedbackButtons(element, block, ctx) {
    const node = el("span", "bk-feedback");
    for (const [key, icon, positive] of [["positive_button", "👍", true], ["negative_button", "👎", false]]) {
      const spec = element[key] || {};
      const label = (spec.text && spec.text.text) || (positive ? "Good" : "Bad");
      const thumb = el("button", "bk-feedback-button", icon);
      thumb.type = "button";
      thumb.title = label;
      thumb.setAttribute("aria-label", spec.accessibility_label || label);
      thumb.dataset.feedback = positive ? "positive" : "negative";
      thumb.addEventListener("click", async () => {
        node.querySelectorAll("button").forEach((b) => b.classList.toggle("chosen", b === thumb));
        await ctx.send("feedback", { positive });
      });
      node.appendChild(thumb);
    }
    return node;
  }

  function remember(ctx, block, element, value) {
    ctx.drafts.set(draftKey(ctx, block.block_id, element.action_id), value);
  }

  function recalled(ctx, block, element) {
    return ctx.drafts.get(draftKey(ctx, block.block_id, element.action_id));
  }

  async function choose(ctx, block, element, body) {
    if (element.confirm && !(await ctx.confirm(element.confirm))) return;
    await ctx.send("select", { block_id: block.block_id, action_id: element.action_id, ...body });
  }

  function staticSelect(element, block, ctx) {
    const node = el("select", "bk-select");
    node.dataset.type = element.type;
    const placeholder = el("option", "", plain(element.placeholder ? element.placeholder.text : "Select an item"));
    placeholder.value = "";
    node.appendChild(placeholder);
    const addOption = (parent, option) => {
      const item = el("option", "", plain(option.text ? option.text.text : option.value));
      item.value = option.value;
      parent.appendChild(item);
    };
    if (element.option_groups) {
      for (const group of element.option_groups) {
        const optgroup = document.createElement("optgroup");
        optgroup.label = group.label ? group.label.text : "";
        (group.options || []).forEach((o) => addOption(optgroup, o));
        node.appendChild(optgroup);
      }
    } else {
      (element.options || []).forEach((o) => addOption(node, o));
    }
    const initial = recalled(ctx, block, element) ?? (element.initial_option ? element.initial_option.value : "");
    node.value = initial || "";
    node.addEventListener("change", async () => {
      remember(ctx, block, element, node.value);
      if (node.value) await choose(ctx, block, element, { value: node.value });
    });
    return node;
  }

  function peopleSelect(element, block, ctx, multi) {
    const wrap = el("div", multi ? "bk-people multi" : "bk-people");
    wrap.dataset.type = element.type;
    let chosen = recalled(ctx, block, element);
    if (chosen === undefined) chosen = multi ? [...(element.initial_users || [])] : (element.initial_user ? [element.initial_user] : []);
    chosen = Array.isArray(chosen) ? chosen : chosen ? [chosen] : [];
    wrap.dataset.value = JSON.stringify(chosen);
    const changed = async () => {
      remember(ctx, block, element, multi ? chosen : chosen[0] || null);
      wrap.dataset.value = JSON.stringify(chosen);
      draw();
      // The server keeps the choice; it only reaches the bot when Slack would dispatch it.
      await ctx.send("select", { block_id: block.block_id, action_id: element.action_id, users: chosen });
    };
    function draw() {
      wrap.innerHTML = "";
      if (multi) {
        for (const id of chosen) {
          const person = ctx.people.find((p) => p.id === id) || { name: id, avatar: "" };
          const chip = el("span", "chip", `<img class="avatar xxs" src="${escapeHtml(person.avatar)}" alt="">${escapeHtml(person.name)}`);
          const remove = el("button", "chip-x", "×");
          remove.type = "button";
          remove.setAttribute("aria-label", `Remove ${person.name}`);
          remove.addEventListener("click", () => { chosen = chosen.filter((c) => c !== id); changed(); });
          chip.appendChild(remove);
          wrap.appendChild(chip);
        }
      }
      const picker = el("select", "bk-select");
      const first = el("option", "", plain(element.placeholder ? element.placeholder.text : multi ? "Add people…" : "Select a person"));
      first.value = "";
      picker.appendChild(first);
      for (const person of ctx.people) {
        if (multi && chosen.includes(person.id)) continue;
        const option = el("option", "", plain(person.name + (person.real_name ? ` — ${person.real_name}` : "")));
        option.value = person.id;
        picker.appendChild(option);
      }
      picker.value = multi ? "" : chosen[0] || "";
      picker.addEventListener("change", () => {
        if (!picker.value) return;
        chosen = multi ? [...chosen, picker.value] : [picker.value];
        changed();
      });
      wrap.appendChild(picker);
    }
    draw();
    return wrap;
  }

  function conversationSelect(element, block, ctx) {
    const node = el("select", "bk-select");
    node.dataset.type = element.type;
    const first = el("option", "", plain(element.placeholder ? element.placeholder.text : "Select a channel"));
    first.value = "";
    node.appendChild(first);
    for (const channel of ctx.channelList) {
      const option = el("option", "", plain((channel.is_im ? "@" : "#") + channel.name));
      option.value = channel.id;
      node.appendChild(option);
    }
    node.value = recalled(ctx, block, element) || element.initial_conversation || element.initial_channel || "";
    node.addEventListener("change", async () => {
      remember(ctx, block, element, node.value);
      if (node.value) await choose(ctx, block, element, { value: node.value });
    });
    return node;
  }

  function choiceList(element, block, ctx, kind) {
    const wrap = el("div", `bk-choices ${kind}`);
    wrap.dataset.type = element.type;
    const name = `${draftKey(ctx, block.block_id, element.action_id)}`;
    let selected = recalled(ctx, block, element);
    if (selected === undefined) {
      selected = kind === "radio"
        ? (element.initial_option ? element.initial_option.value : null)
        : (element.initial_options || []).map((o) => o.value);
    }
    for (const option of element.options || []) {
      const label = el("label", "bk-choice");
      const input = document.createElement("input");
      input.type = kind;
      input.name = name;
      input.value = option.value;
      input.checked = kind === "radio" ? selected === option.value : (selected || []).includes(option.value);
      label.appendChild(input);
      const text = el("span", "", textHtml(option.text, ctx) + (option.description ? `<div class="bk-desc">${textHtml(option.description, ctx)}</div>` : ""));
      label.appendChild(text);
      input.addEventListener("change", async () => {
        const value = kind === "radio"
          ? input.value
          : [...wrap.querySelectorAll("input:checked")].map((i) => i.value);
        remember(ctx, block, element, value);
        await choose(ctx, block, element, { value });
      });
      wrap.appendChild(label);
    }
    return wrap;
  }

  function multiStatic(element, block, ctx) {
    const wrap = el("div", "bk-multi");
    wrap.dataset.type = element.type;
    let chosen = recalled(ctx, block, element);
    if (chosen === undefined) chosen = (element.initial_options || []).map((o) => o.value);
    const options = allOptions(element);
    const draw = () => {
      wrap.innerHTML = "";
      wrap.dataset.value = JSON.stringify(chosen);
      for (const value of chosen) {
        const option = options.find((o) => o.value === value);
        const chip = el("span", "chip", plain(option && option.text ? option.text.text : value));
        const remove = el("button", "chip-x", "×");
        remove.type = "button";
        remove.addEventListener("click", () => { chosen = chosen.filter((c) => c !== value); update(); });
        chip.appendChild(remove);
        wrap.appendChild(chip);
      }
      const picker = el("select", "bk-select");
      const first = el("option", "", plain(element.placeholder ? element.placeholder.text : "Select options"));
      first.value = "";
      picker.appendChild(first);
      picker.disabled = Boolean(element.max_selected_items) && chosen.length >= element.max_selected_items;
      for (const option of options) {
        if (chosen.includes(option.value)) continue;
        const item = el("option", "", plain(option.text ? option.text.text : option.value));
        item.value = option.value;
        picker.appendChild(item);
      }
      picker.addEventListener("change", () => { if (picker.value) { chosen = [...chosen, picker.value]; update(); } });
      wrap.appendChild(picker);
    };
    const update = async () => {
      if (element.max_selected_items && chosen.length > element.max_selected_items) {
        chosen = chosen.slice(0, element.max_selected_items); // Slack's menu stops at max_selected_items
      }
      remember(ctx, block, element, chosen);
      draw();
      await choose(ctx, block, element, { value: chosen });
    };
    draw();
    return wrap;
  }

  function textInput(element, block, ctx) {
    const multiline = element.type === "plain_text_input" && element.multiline;
    const node = document.createElement(multiline ? "textarea" : "input");
    node.className = "bk-input";
    node.dataset.type = element.type;
    if (!multiline) {
      node.type = { number_input: "number", email_text_input: "email", url_text_input: "url" }[element.type] || "text";
      if (element.type === "number_input" && element.is_decimal_allowed) node.step = "any";
    } else {
      node.rows = 4;
    }
    if (element.placeholder) node.placeholder = element.placeholder.text;
    if (element.max_length) node.maxLength = element.max_length;
    const key = draftKey(ctx, block.block_id, element.action_id);
    node.dataset.draft = key;
    node.value = ctx.drafts.get(key) ?? element.initial_value ?? "";
    node.addEventListener("input", () => ctx.drafts.set(key, node.value));
    if (block.dispatch_action || block.type !== "input") {
      node.addEventListener("keydown", async (event) => {
        if (event.key === "Enter" && !event.shiftKey && !multiline) {
          event.preventDefault();
          await ctx.send("input", { block_id: block.block_id, action_id: element.action_id, value: node.value });
        }
      });
    }
    return node;
  }

  function picker(element, block, ctx, type, initialKey) {
    const node = document.createElement("input");
    node.type = type;
    node.className = "bk-input narrow";
    node.dataset.type = element.type;
    node.value = recalled(ctx, block, element) ?? element[initialKey] ?? "";
    node.addEventListener("change", async () => {
      remember(ctx, block, element, node.value);
      await choose(ctx, block, element, { value: node.value });
    });
    return node;
  }

  // Slack sends epoch seconds; the local workspace shows and edits them as UTC, to the minute. An untouched
  // picker reports its initial_date_time exactly (seconds included), as Slack reports an untouched input.
  function dateTimePicker(element, block, ctx) {
    const node = document.createElement("input");
    node.type = "datetime-local";
    node.className = "bk-input narrow";
    node.dataset.type = element.type;
    const initial = element.initial_date_time;
    const shown = Number.isInteger(initial) ? new Date(initial * 1000).toISOString().slice(0, 16) : "";
    if (shown) {
      node.dataset.initialShown = shown;
      node.dataset.initialEpoch = String(initial);
    }
    node.value = recalled(ctx, block, element) ?? shown;
    node.addEventListener("change", async () => {
      remember(ctx, block, element, node.value);
      await choose(ctx, block, element, { value: node.value });
    });
    return node;
  }

  function overflow(element, block, ctx) {
    const wrap = el("div", "bk-overflow");
    const toggle = el("button", "bk-button icon", "⋮");
    toggle.type = "button";
    toggle.setAttribute("aria-label", "More actions");
    const menu = el("div", "bk-menu");
    menu.hidden = true;
    for (const option of element.options || []) {
      const item = el("button", "bk-menu-item", plain(option.text ? option.text.text : option.value));
      item.type = "button";
      item.addEventListener("click", async () => {
        menu.hidden = true;
        if (element.confirm && !(await ctx.confirm(element.confirm))) return;
        if (option.url) window.open(option.url, "_blank", "noopener");
        await ctx.send("click", { block_id: block.block_id, action_id: element.action_id, value: option.value });
      });
      menu.appendChild(item);
    }
    toggle.addEventListener("click", () => { menu.hidden = !menu.hidden; });
    wrap.append(toggle, menu);
    return wrap;
  }

  function imagePlaceholder(element, small) {
    const alt = element.alt_text || "image";
    const node = el("div", small ? "bk-image small" : "bk-image", small ? "🖼" : `<span>🖼 ${escapeHtml(alt)}</span>`);
    node.title = `${alt}${element.image_url ? ` — ${element.image_url}` : ""} (images are not loaded in the local workspace)`;
    return node;
  }

  function element(elementObj, block, ctx) {
    if (!elementObj || typeof elementObj !== "object") return unsupported("element", String(elementObj));
    let node;
    switch (elementObj.type) {
      case "button": node = button(elementObj, block, ctx); break;
      case "feedback_buttons": node = feedbackButtons(elementObj, block, ctx); break;
      case "static_select":
      case "external_select": node = staticSelect(elementObj, block, ctx); break;
      case "multi_static_select":
      case "multi_external_select": node = multiStatic(elementObj, block, ctx); break;
      case "users_select": node = peopleSelect(elementObj, block, ctx, false); break;
      case "multi_users_select": node = peopleSelect(elementObj, block, ctx, true); break;
      case "conversations_select":
      case "channels_select": node = conversationSelect(elementObj, block, ctx); break;
      case "radio_buttons": node = choiceList(elementObj, block, ctx, "radio"); break;
      case "checkboxes": node = choiceList(elementObj, block, ctx, "checkbox"); break;
      case "overflow": node = overflow(elementObj, block, ctx); break;
      case "plain_text_input":
      case "number_input":
      case "email_text_input":
      case "url_text_input": node = textInput(elementObj, block, ctx); break;
      case "datepicker": node = picker(elementObj, block, ctx, "date", "initial_date"); break;
      case "timepicker": node = picker(elementObj, block, ctx, "time", "initial_time"); break;
      case "datetimepicker": node = dateTimePicker(elementObj, block, ctx); break;
      case "image": node = imagePlaceholder(elementObj, true); break;
      default: node = unsupported("element", elementObj.type);
    }
    node.dataset.block = block.block_id || "";
    node.dataset.action = elementObj.action_id || "";
    node.dataset.elementType = elementObj.type;
    return node;
  }

  // ---- blocks ---------------------------------------------------------------------------------------

  function richTextElements(elements, ctx) {
    return (elements || []).map((item) => {
      let html;
      switch (item.type) {
        case "text": html = plain(item.text, false).replace(/\n/g, "<br>"); break;
        case "link": html = `<a href="${escapeHtml(item.url)}" target="_blank" rel="noopener noreferrer">${escapeHtml(item.text || item.url)}</a>`; break;
        case "user": html = mrkdwn(`<@${item.user_id}>`, ctx.mctx); break;
        case "channel": html = mrkdwn(`<#${item.channel_id}>`, ctx.mctx); break;
        case "usergroup": html = `<span class="mention">@group</span>`; break;
        case "broadcast": html = `<span class="mention broadcast">@${escapeHtml(item.range)}</span>`; break;
        case "emoji": html = item.unicode ? String.fromCodePoint(...item.unicode.split("-").map((h) => parseInt(h, 16))) : (emoji(item.name) || `:${escapeHtml(item.name)}:`); break;
        case "date": html = escapeHtml(item.fallback || ""); break;
        default: html = `<span class="bk-unsupported inline">[${escapeHtml(item.type)}]</span>`;
      }
      const style = item.style || {};
      if (style.code) html = `<code>${html}</code>`;
      if (style.bold) html = `<b>${html}</b>`;
      if (style.italic) html = `<i>${html}</i>`;
      if (style.strike) html = `<s>${html}</s>`;
      return html;
    }).join("");
  }

  function richText(block, ctx) {
    const node = el("div", "bk-rich");
    for (const part of block.elements || []) {
      switch (part.type) {
        case "rich_text_section": node.appendChild(el("div", "", richTextElements(part.elements, ctx))); break;
        case "rich_text_preformatted": node.appendChild(el("pre", "pre", richTextElements(part.elements, ctx))); break;
        case "rich_text_quote": node.appendChild(el("blockquote", "", richTextElements(part.elements, ctx))); break;
        case "rich_text_list": {
          const list = el(part.style === "ordered" ? "ol" : "ul", `indent-${part.indent || 0}`);
          for (const item of part.elements || []) list.appendChild(el("li", "", richTextElements(item.elements, ctx)));
          node.appendChild(list);
          break;
        }
        default: node.appendChild(unsupported("rich text element", part.type));
      }
    }
    return node;
  }

  function section(block, ctx) {
    const node = el("div", "bk-section");
    const body = el("div", "bk-section-body");
    if (block.text) body.appendChild(el("div", "bk-text", textHtml(block.text, ctx)));
    if (block.fields && block.fields.length) {
      const fields = el("div", "bk-fields");
      for (const field of block.fields) fields.appendChild(el("div", "bk-field", textHtml(field, ctx)));
      body.appendChild(fields);
    }
    node.appendChild(body);
    if (block.accessory) {
      const accessory = el("div", "bk-accessory");
      accessory.appendChild(block.accessory.type === "image" ? imagePlaceholder(block.accessory, false) : element(block.accessory, block, ctx));
      node.appendChild(accessory);
    }
    return node;
  }

  function input(block, ctx) {
    const node = el("div", "bk-input-block");
    node.dataset.block = block.block_id || "";
    const optional = block.optional ? ' <span class="bk-optional">(optional)</span>' : "";
    node.appendChild(el("label", "bk-label", textHtml(block.label, ctx) + optional));
    node.appendChild(element(block.element, block, ctx));
    if (block.hint) node.appendChild(el("div", "bk-hint", textHtml(block.hint, ctx)));
    const error = ctx.errors && ctx.errors[block.block_id];
    if (error) {
      node.classList.add("has-error");
      node.appendChild(el("div", "bk-error", `⚠ ${plain(error)}`));
    }
    return node;
  }

  const TASK_ICONS = { pending: "○", in_progress: "◔", complete: "✓", error: "✕" };

  // A task_card block (a streamed answer's task): its status icon, title, details and output.
  function taskCard(task, ctx) {
    const node = el("div", `bk-task task-${escapeHtml(task.status || "pending")}`);
    node.dataset.taskId = task.task_id || "";
    node.dataset.status = task.status || "pending";
    const head = el("div", "bk-task-head",
      `<span class="bk-task-icon" title="${escapeHtml(task.status || "")}">${TASK_ICONS[task.status] || "○"}</span>` +
      `<span class="bk-task-title">${escapeHtml(task.title || "")}</span>`);
    node.appendChild(head);
    if (task.details) node.appendChild(Object.assign(richText(task.details, ctx), { className: "bk-task-details" }));
    if (task.output) node.appendChild(Object.assign(richText(task.output, ctx), { className: "bk-task-output" }));
    return node;
  }

  function block(blockObj, ctx) {
    if (!blockObj || typeof blockObj !== "object") return unsupported("block", String(blockObj));
    switch (blockObj.type) {
      case "section": return section(blockObj, ctx);
      case "header": return el("div", "bk-header", textHtml(blockObj.text, ctx));
      case "divider": return el("hr", "bk-divider");
      case "context": {
        const node = el("div", "bk-context");
        for (const item of blockObj.elements || []) {
          node.appendChild(item.type === "image" ? imagePlaceholder(item, true) : el("span", "", textHtml(item, ctx)));
        }
        return node;
      }
      case "actions":
      case "context_actions": {
        const node = el("div", "bk-actions");
        for (const item of blockObj.elements || []) node.appendChild(element(item, blockObj, ctx));
        return node;
      }
      case "input": return input(blockObj, ctx);
      case "image": {
        const node = el("div", "bk-image-block");
        if (blockObj.title) node.appendChild(el("div", "bk-image-title", textHtml(blockObj.title, ctx)));
        node.appendChild(imagePlaceholder(blockObj, false));
        return node;
      }
      case "rich_text": return richText(blockObj, ctx);
      case "markdown": return el("div", "bk-text", markdown(blockObj.text, ctx.mctx));
      case "task_card": return taskCard(blockObj, ctx);
      case "plan": {  // chat.startStream(task_display_mode="plan"): the tasks together, under the plan's title
        const node = el("div", "bk-plan");
        node.appendChild(el("div", "bk-plan-title", escapeHtml(blockObj.title || "")));
        for (const task of blockObj.tasks || []) node.appendChild(taskCard(task, ctx));
        return node;
      }
      default: return unsupported("block", blockObj.type);
    }
  }

  function render(blocks, ctx) {
    const wrap = el("div", "bk");
    for (const item of blocks || []) {
      try {
        wrap.appendChild(block(item, ctx));
      } catch (error) {
        console.error("block render failed", item, error);
        wrap.appendChild(unsupported("block", item && item.type));
      }
    }
    return wrap;
  }

  // The values of every input block of a rendered view, as {block_id: {action_id: value}}.
  function collectInputs(root) {
    const values = {};
    for (const node of root.querySelectorAll(".bk-input-block [data-element-type]")) {
      const blockId = node.dataset.block;
      const actionId = node.dataset.action;
      if (!blockId || !actionId) continue;
      const type = node.dataset.elementType;
      let value;
      if (node.dataset.value !== undefined) {
        const list = JSON.parse(node.dataset.value);
        value = type === "users_select" ? (list[0] || null) : list;
      } else if (type === "radio_buttons") {
        const checked = node.querySelector("input:checked");
        value = checked ? checked.value : null;
      } else if (type === "checkboxes") {
        value = [...node.querySelectorAll("input:checked")].map((i) => i.value);
      } else if (type === "datetimepicker" && node.value && node.value === node.dataset.initialShown) {
        value = Number(node.dataset.initialEpoch);
      } else if ("value" in node) {
        value = node.value === "" ? null : node.value;
      } else {
        continue;
      }
      (values[blockId] = values[blockId] || {})[actionId] = value;
    }
    return values;
  }

  window.BlockKit = { render, collectInputs, textHtml };
})();
