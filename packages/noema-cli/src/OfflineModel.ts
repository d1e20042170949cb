/**
 * OfflineModel: a deterministic stand-in for a language model, so noema can be
 * tried (and tested) without an API key or a network.
 *
 * It is a handful of rules, not an LLM, and says so. It still drives the real
 * machinery: arithmetic in the last user message becomes a `calculator` tool
 * call with JSON arguments, a question about the time a `current_time` call, a
 * request to read a file a `read_file` call; once the tool results are in, it
 * answers from them ("2 + 2 = 4"). Otherwise it answers briefly from the
 * conversation (it remembers "my name is ..."). Answers stream word by word,
 * through core's `ChatModel.make`, like any provider's.
 */

import { ChatModel, Message } from "@noema/core"
import { Duration, Effect, Layer, Stream } from "effect"
import * as Calculator from "./tools/Calculator.js"

export const provider = "offline"
export const modelName = "noema-offline"

export interface Options {
  /** Pause before each streamed word, so the stream is visible in a terminal. Default: none. */
  readonly wordDelay?: Duration.Input
}

/** What the offline model decided to do with a request. */
export type Decision =
  /** `missingTool`: the answer says it cannot be done without that tool (a routine task stays open). */
  | { readonly type: "text"; readonly text: string; readonly missingTool?: string }
  | {
      readonly type: "tool-call"
      readonly name: string
      readonly arguments: { readonly [key: string]: unknown }
    }

// ---------------------------------------------------------------------------
// Recognising what the user asked for
// ---------------------------------------------------------------------------

const wordOperators: ReadonlyArray<readonly [RegExp, string]> = [
  [/\bmultiplied by\b/gi, "*"],
  [/\bdivided by\b/gi, "/"],
  [/\bto the power of\b/gi, "^"],
  [/\bplus\b/gi, "+"],
  [/\bminus\b/gi, "-"],
  [/\btimes\b/gi, "*"],
  [/\bmod(?:ulo)?\b/gi, "%"],
  [/\bsquare root of\s+(\d+(?:\.\d+)?)/gi, "sqrt($1)"],
  [/(\d+(?:\.\d+)?)\s*(?:%|percent)\s+of\s+/gi, "$1 / 100 * "]
]

const names = [...Calculator.functionNames, ...Calculator.constantNames].join("|")
const expressionRun = new RegExp(`(?:[\\d.+\\-*/%^(),×÷−\\s]|\\b(?:${names})\\b)+`, "gi")
const mathCue = /\b(?:calculate|compute|evaluate|what(?:'s| is)|how much|solve|result of)\b|=/i
const operatorOrFunction = new RegExp(
  `[+\\-*/%^×÷−]|\\b(?:${Calculator.functionNames.join("|")})\\s*\\(`,
  "i"
)

/** The arithmetic expression in `text`, if it contains one worth calculating. */
export const findExpression = (text: string): string | undefined => {
  let normalised = text
  for (const [pattern, replacement] of wordOperators) normalised = normalised.replace(pattern, replacement)
  let best: string | undefined
  for (const match of normalised.matchAll(expressionRun)) {
    const candidate = match[0].trim().replace(/^[,\s]+|[,.\s]+$/g, "")
    if (!/\d|\b(?:pi|e|tau)\b/i.test(candidate) || !operatorOrFunction.test(candidate)) continue
    // "-5" alone is a number, not a calculation.
    if (/^[-+]?\d*\.?\d+$/.test(candidate.replace(/\s/g, ""))) continue
    try {
      Calculator.evaluateSync(candidate)
    } catch (error) {
      // A division by zero is still a calculation the user asked for; let the tool say so.
      if (!(error instanceof Calculator.CalculatorError) || error.message.startsWith("Syntax")) continue
    }
    if (best === undefined || candidate.length > best.length) best = candidate
  }
  if (best === undefined) return undefined
  const significant = (value: string) => value.replace(/[\s?!.,]/g, "").length
  // An expression that is most of the message, or one the user asked about, is a calculation.
  return significant(best) * 2 >= significant(text) || mathCue.test(text) ? best : undefined
}

const cityZones: Readonly<Record<string, string>> = {
  tokyo: "Asia/Tokyo",
  london: "Europe/London",
  paris: "Europe/Paris",
  berlin: "Europe/Berlin",
  madrid: "Europe/Madrid",
  rome: "Europe/Rome",
  "new york": "America/New_York",
  chicago: "America/Chicago",
  "los angeles": "America/Los_Angeles",
  "san francisco": "America/Los_Angeles",
  sydney: "Australia/Sydney",
  delhi: "Asia/Kolkata",
  beijing: "Asia/Shanghai",
  singapore: "Asia/Singapore"
}

/** The time-zone arguments for a question about the time or date, if it is one. */
export const findTimeQuestion = (text: string): { readonly timezone?: string } | undefined => {
  const asksTime =
    /\b(?:what|which|tell me|current|today'?s?|now)\b[^.?!]*\b(?:time|date|day|year|month)\b/i.test(text) ||
    /\b(?:time|date) (?:is it|now|today)\b|\bwhat day is\b/i.test(text)
  if (!asksTime) return undefined
  const zone = /\b([A-Z][A-Za-z_]+\/[A-Z][A-Za-z_]+(?:\/[A-Z][A-Za-z_]+)?)\b/.exec(text)?.[1]
  if (zone !== undefined) return { timezone: zone }
  if (/\b(?:UTC|GMT)\b/.test(text)) return { timezone: "UTC" }
  const lower = text.toLowerCase()
  for (const [city, timezone] of Object.entries(cityZones)) {
    if (lower.includes(`in ${city}`)) return { timezone }
  }
  return {}
}

/** The path in a request to read or show a file, if it is one. */
export const findFileRequest = (text: string): string | undefined => {
  if (!/\b(?:read|show|open|cat|display|print|look at|contents? of|what(?:'s| is) in)\b/i.test(text))
    return undefined
  const quoted = /"([^"]+)"|'([^']+)'|`([^`]+)`/.exec(text)
  if (quoted !== null) return quoted[1] ?? quoted[2] ?? quoted[3]
  const named = /\bfile\s+([^\s?!,;]+)/i.exec(text)?.[1]
  if (named !== undefined) return named.replace(/\.$/, "")
  const pathLike =
    /(?:^|\s)((?:\.{1,2}\/|\/)?[\w@~\-/]*[\w-]\.[A-Za-z0-9]{1,8})(?=$|[\s?!,;:]|\.(?:\s|$))/.exec(text)
  return pathLike?.[1]
}

const namePattern = /\bmy name is\s+([\p{L}][\p{L}'’-]*(?:\s+[\p{Lu}][\p{L}'’-]*)*)/iu
const askNamePattern = /\bwhat(?:'s| is) my name\b|\bwho am i\b|\b(?:know|remember) my name\b/i

// ---------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------

const shorten = (text: string, max: number): string => {
  const single = text.replace(/\s+/g, " ").trim()
  return single.length <= max ? single : `${single.slice(0, max - 1)}…`
}

/** "2+2*3" as people write it: "2 + 2 * 3" (unary minus kept tight). */
export const prettyExpression = (expression: string): string => {
  const compact = expression.replace(/\s+/g, "")
  let out = ""
  for (let i = 0; i < compact.length; i++) {
    const char = compact[i] as string
    const previous = compact[i - 1]
    const binary = "+-*/%^×÷".includes(char) && previous !== undefined && /[\w.)]/.test(previous)
    out += binary ? ` ${char} ` : char === "," ? ", " : char
  }
  return out
}

const parseArguments = (json: string): { readonly [key: string]: unknown } => {
  try {
    const value: unknown = JSON.parse(json)
    return typeof value === "object" && value !== null ? (value as { readonly [key: string]: unknown }) : {}
  } catch {
    return {}
  }
}

const answerFromTool = (call: Message.ToolCall | undefined, result: Message.ToolMessage): string => {
  const args = call === undefined ? {} : parseArguments(call.arguments)
  switch (result.name) {
    case "calculator": {
      const expression = typeof args.expression === "string" ? prettyExpression(args.expression) : "That"
      return result.isError
        ? `I couldn't calculate ${expression}: ${result.content}`
        : `${expression} = ${result.content}`
    }
    case "current_time":
      return result.isError ? `I couldn't get the time: ${result.content}` : `It is ${result.content}.`
    case "read_file": {
      const file = typeof args.path === "string" ? args.path : "the file"
      if (result.isError) return `I couldn't read ${file}: ${result.content}`
      const lines = result.content.split("\n")
      if (lines.at(-1) === "") lines.pop()
      const shown = lines.slice(0, 10).join("\n")
      const more = lines.length > 10 ? `\n… (${lines.length - 10} more lines)` : ""
      return lines.length === 0
        ? `${file} is empty.`
        : `${file} has ${lines.length} line${lines.length === 1 ? "" : "s"}. It begins:\n\n${shown}${more}`
    }
    default:
      return result.isError
        ? `The ${result.name} tool failed: ${result.content}`
        : `The ${result.name} tool answered: ${shorten(result.content, 300)}`
  }
}

const introduction =
  "I'm noema's offline model: a few deterministic rules, not a language model. I can do arithmetic, " +
  "tell the time, read a file in this directory and remember your name. Configure a real model with " +
  "OPENAI_API_KEY (or --api-key / --base-url) for real answers."

const answerUser = (text: string, earlierUserTexts: ReadonlyArray<string>): string => {
  if (askNamePattern.test(text)) {
    for (let i = earlierUserTexts.length - 1; i >= 0; i--) {
      const name = namePattern.exec(earlierUserTexts[i] as string)?.[1]
      if (name !== undefined) return `Your name is ${name}.`
    }
    return "You haven't told me your name yet."
  }
  const name = namePattern.exec(text)?.[1]
  if (name !== undefined) return `Nice to meet you, ${name}. I'll remember that.`
  if (/\bwhat did i (?:say|ask|tell you)\b/i.test(text)) {
    const previous = earlierUserTexts.at(-1)
    return previous === undefined
      ? "This is the first thing you said."
      : `You said: "${shorten(previous, 200)}"`
  }
  if (/\b(?:who|what) are you\b|\bare you (?:an? )?(?:ai|llm|gpt|real|human|bot)\b/i.test(text))
    return introduction
  if (/^\s*(?:hi|hello|hey|howdy|good (?:morning|afternoon|evening))\b/i.test(text))
    return `Hello! ${introduction}`
  if (/^\s*(?:thanks|thank you|thx)\b/i.test(text)) return "You're welcome."
  return (
    `Noted: "${shorten(text, 80)}". I'm the offline model, so I can't say more — ` +
    `try "what is 2+2?", "what time is it?", "read README.md", or configure a real model (noema --help).`
  )
}

/** Saying what is true: no tools at all (chat's --no-tools), or others than the one needed (a routine's task). */
const toolsOff = (tool: string, offered: ReadonlySet<string>): Decision => ({
  type: "text",
  text:
    offered.size === 0
      ? `That needs the ${tool} tool, but tools are turned off (--no-tools), and I'm only the offline model.`
      : `That needs the ${tool} tool, which I was not given here (only ${[...offered].join(", ")}), and I'm only the offline model.`,
  missingTool: tool
})

/**
 * A routine's task (`complete_task` offered): the usual rules do the work, and their
 * answer becomes the verdict: done, unless it says a tool is missing (then open, saying why).
 */
const withVerdict = (request: ChatModel.ChatRequest, decision: Decision): Decision =>
  decision.type === "text" && (request.tools ?? []).some((tool) => tool.name === "complete_task")
    ? {
        type: "tool-call",
        name: "complete_task",
        arguments: { done: decision.missingTool === undefined, summary: decision.text }
      }
    : decision

/** The last assistant text in `messages` (a step's report, for the plan workflow's review and notice). */
const lastAssistantText = (messages: ReadonlyArray<Message.Message>): string => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as Message.Message
    if (message.role === "assistant" && Message.text(message).trim() !== "") return Message.text(message)
  }
  return ""
}

/**
 * The plan workflow's calls (`PlanAgent`): a one-step plan for the request, a
 * review that accepts the step's report, and the report sent to the user. The
 * step itself is answered by the usual rules (tools included).
 */
const planWorkflow = (
  request: ChatModel.ChatRequest,
  messages: ReadonlyArray<Message.Message>,
  asked: string
): Decision | undefined => {
  const format = request.responseFormat
  if (format?.type === "json-schema" && format.name === "plan") {
    return {
      type: "text",
      text: JSON.stringify({
        thoughts: "I am the offline model: one step, answered by my usual rules.",
        goal: shorten(asked, 100),
        steps: [{ title: "Answer the request", detail: shorten(asked, 200) }]
      })
    }
  }
  if (format?.type === "json-schema" && format.name === "review") {
    const report = lastAssistantText(messages)
    return {
      type: "text",
      text: JSON.stringify({
        thoughts: "The step answered the request.",
        outcome: report === "" ? "failed" : "done",
        summary: shorten(report === "" ? "no answer" : report, 120),
        decision: "finish",
        remainingSteps: null
      })
    }
  }
  if ((request.tools ?? []).some((tool) => tool.name === "user_sendMessage")) {
    const report = lastAssistantText(messages)
    return report === ""
      ? { type: "text", text: "" }
      : { type: "tool-call", name: "user_sendMessage", arguments: { text: report } }
  }
  return undefined
}

/** The request's parts, split where the user joined them ("…; …", "… and then …", "…, then …"). */
export const requestParts = (text: string): Array<string> =>
  text
    .split(/\s*;\s*|\s*,?\s+and then\s+|\s*,\s*then\s+|\s+and also\s+|\.\s+(?=[A-Z])/)
    .map((part) => part.trim().replace(/[.!]+$/, ""))
    .filter((part) => part !== "")

/**
 * The task planner's calls (`@noema/planner`): `create_tasks` with one task per part of the
 * request (under one parent when there are several), a supervisor's evaluation that accepts
 * results that are all done, the first candidate when asked to choose an assistant, and no
 * statements to extract. The leaves themselves are answered by the usual rules (tools included).
 */
const taskPlanner = (request: ChatModel.ChatRequest, asked: string): Decision | undefined => {
  const format = request.responseFormat
  if ((request.tools ?? []).some((tool) => tool.name === "create_tasks")) {
    const leaf = (part: string) => ({
      title: shorten(part, 60),
      purpose: part,
      instructions: part,
      evaluation: "The request is answered.",
      subtasks: []
    })
    const parts = requestParts(asked)
    const tasks =
      parts.length <= 1
        ? [leaf(asked.trim() === "" ? "Answer the request" : asked)]
        : [
            {
              title: shorten(asked, 60),
              purpose: asked,
              instructions: "Get every part of the request answered.",
              evaluation: "Every part is answered.",
              subtasks: parts.map(leaf)
            }
          ]
    return { type: "tool-call", name: "create_tasks", arguments: { tasks } }
  }
  if (format?.type === "json-schema" && format.name === "evaluation") {
    const failed = [...asked.matchAll(/^## (.*) \(failed\)$/gm)].map((match) => match[1])
    return {
      type: "text",
      text: JSON.stringify({
        successful: failed.length === 0,
        reason:
          failed.length === 0
            ? "Every subtask is done (the offline model checks that, not the content)."
            : `Not done: ${failed.join(", ")}.`,
        corrective: []
      })
    }
  }
  if (format?.type === "json-schema" && format.name === "choose_assistant")
    return {
      type: "text",
      text: JSON.stringify({ assistant: 1, reason: "The most similar one (the offline model cannot judge)." })
    }
  if (format?.type === "json-schema" && format.name === "statements")
    return { type: "text", text: JSON.stringify({ triples: [] }) }
  return undefined
}

/**
 * A stage of a run (`@noema/runs`: the stage agent has `write_artifact`): one Markdown
 * artifact, named as the instructions say ("... as brief.md") or after the stage, holding
 * the request, the stage's instructions and what earlier stages made (their answers and
 * the names of their artifacts); then a line saying so. Honest about being the offline model: the form is right, the content is not thought.
 */
const runStage = (
  request: ChatModel.ChatRequest,
  messages: ReadonlyArray<Message.Message>,
  asked: string
): Decision | undefined => {
  if (!(request.tools ?? []).some((tool) => tool.name === "write_artifact")) return undefined
  const last = messages[messages.length - 1]
  // The tool's own report ("Wrote brief.md (181 bytes, sha256 ...)", or why it refused).
  if (last?.role === "tool") return { type: "text", text: Message.text(last) }
  const system = messages.find((message) => message.role === "system")
  const instructions = system === undefined ? "" : Message.text(system).trim()
  // The stage's input as @noema/runs writes it: the request, then each earlier stage's
  // answer (`## key (stage n)`) and its artifacts (`### Artifact key/path (...)`).
  const [requested = "", earlierText = ""] = asked.split(
    /\n\nEarlier stages \(their answers and artifacts\):\n/
  )
  const name = /\bas ([\w.-]+\.(?:md|markdown|txt|json))\b/i.exec(instructions)?.[1] ?? "notes.md"
  const artifacts = [...earlierText.matchAll(/^### Artifact ([^/\s]+)\/(\S+) \(/gm)]
  const earlier = [...earlierText.matchAll(/^## (\S+) \(stage \d+\)\n([^\n]*)/gm)].map((match) => {
    const own = artifacts.filter((artifact) => artifact[1] === match[1]).map((artifact) => artifact[2])
    return `- ${match[1]}: ${shorten(match[2] ?? "", 140)}${own.length === 0 ? "" : ` (artifacts: ${own.join(", ")})`}`
  })
  const content = [
    `# ${shorten(requested.trim() || "The request", 80)}`,
    "",
    `**Stage instructions:** ${instructions || "(none)"}`,
    "",
    `**Request:** ${requested.trim()}`,
    ...(earlier.length === 0 ? [] : ["", "**From earlier stages:**", ...earlier]),
    "",
    "_Written by noema's offline model, which follows a stage's form but does not think about its content: configure a model (noema --help) for real work._",
    ""
  ].join("\n")
  return /\.json$/i.test(name)
    ? {
        type: "tool-call",
        name: "write_artifact",
        arguments: {
          path: name,
          content: `${JSON.stringify({ request: requested.trim(), instructions, earlier }, null, 2)}\n`
        }
      }
    : { type: "tool-call", name: "write_artifact", arguments: { path: name, content } }
}

/** The offline model's whole behaviour: a pure function of the request. */
export const decide = (request: ChatModel.ChatRequest): Decision =>
  withVerdict(request, usualDecision(request))

const usualDecision = (request: ChatModel.ChatRequest): Decision => {
  const messages = Array.from(request.messages)
  // What the workflows work from: the last user message.
  const lastAsked = messages.findLast((message) => message.role === "user")
  const asked = lastAsked === undefined ? "" : Message.text(lastAsked)
  const workflow =
    planWorkflow(request, messages, asked) ??
    taskPlanner(request, asked) ??
    runStage(request, messages, asked)
  if (workflow !== undefined) return workflow
  const available = new Set((request.tools ?? []).map((tool) => tool.name))
  let lastUser = -1
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]?.role === "user") {
      lastUser = i
      break
    }
  }
  const sinceUser = messages.slice(lastUser + 1)
  const results = sinceUser.filter((message): message is Message.ToolMessage => message.role === "tool")
  if (results.length > 0) {
    const calls = new Map<string, Message.ToolCall>()
    for (const message of sinceUser) {
      if (message.role === "assistant") for (const call of message.toolCalls ?? []) calls.set(call.id, call)
    }
    return {
      type: "text",
      text: results.map((result) => answerFromTool(calls.get(result.toolCallId), result)).join("\n\n")
    }
  }
  const user = lastUser >= 0 ? (messages[lastUser] as Message.UserMessage) : undefined
  if (user === undefined) return { type: "text", text: introduction }
  const text = Message.text(user)
  const earlier = messages
    .slice(0, lastUser)
    .filter((message): message is Message.UserMessage => message.role === "user")
    .map(Message.text)

  const expression = findExpression(text)
  if (expression !== undefined) {
    return available.has("calculator")
      ? { type: "tool-call", name: "calculator", arguments: { expression } }
      : toolsOff("calculator", available)
  }
  const time = findTimeQuestion(text)
  if (time !== undefined) {
    return available.has("current_time")
      ? { type: "tool-call", name: "current_time", arguments: time.timezone === undefined ? {} : time }
      : toolsOff("current_time", available)
  }
  const file = findFileRequest(text)
  if (file !== undefined) {
    return available.has("read_file")
      ? { type: "tool-call", name: "read_file", arguments: { path: file } }
      : toolsOff("read_file", available)
  }
  return { type: "text", text: answerUser(text, earlier) }
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const estimateTokens = (text: string): number => Math.ceil(text.length / 4)

const usageOf = (messages: Iterable<Message.Message>, output: string): ChatModel.Usage => {
  let inputTokens = 0
  for (const message of messages) inputTokens += estimateTokens(Message.text(message)) + 4
  const outputTokens = estimateTokens(output)
  return { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }
}

const chunksOf = (request: ChatModel.ChatRequest): Array<ChatModel.StreamChunk> => {
  const decision = decide(request)
  const chunks: Array<ChatModel.StreamChunk> = [{ type: "response-metadata", model: modelName }]
  let output: string
  if (decision.type === "text") {
    output = decision.text
    for (const word of decision.text.match(/\S+\s*|\s+/g) ?? [])
      chunks.push({ type: "text-delta", delta: word })
    chunks.push({ type: "finish", finishReason: "stop" })
  } else {
    output = JSON.stringify(decision.arguments)
    let previousCalls = 0
    for (const message of request.messages) if (message.role === "assistant") previousCalls++
    chunks.push({
      type: "tool-call",
      toolCall: { id: `offline_call_${previousCalls + 1}`, name: decision.name, arguments: output }
    })
    chunks.push({ type: "finish", finishReason: "tool-calls" })
  }
  chunks.push({ type: "usage", usage: usageOf(request.messages, output) })
  return chunks
}

/** The offline model as a core `ChatModel` (provider "offline", model "noema-offline"). */
export const make = (options: Options = {}): ChatModel.Service => {
  const delay = options.wordDelay === undefined ? undefined : Duration.fromInputUnsafe(options.wordDelay)
  return ChatModel.make({
    provider,
    model: modelName,
    stream: (request) =>
      Stream.suspend(() => {
        const chunks = Stream.fromIterable(chunksOf(request))
        return delay === undefined || Duration.isZero(delay)
          ? chunks
          : Stream.tap(chunks, (chunk) => (chunk.type === "text-delta" ? Effect.sleep(delay) : Effect.void))
      })
  })
}

export const layer = (options: Options = {}): Layer.Layer<ChatModel.ChatModel> =>
  Layer.succeed(ChatModel.ChatModel, make(options))

export const isOffline = (model: ChatModel.Service): boolean => model.provider === provider
