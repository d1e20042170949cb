/**
 * ResponsesStreams: recorded Responses API streams, to replay through
 * `OpenAiTestServer` (`{ type: "sse", events }`) in tests.
 *
 * Responses API streams shaped like OpenAI's (`POST /v1/responses` with
 * `stream: true`), event for event as the API reference documents them:
 * `response.created`, output items added, text / reasoning summary / function
 * call argument deltas, items done, and `response.completed` (or
 * `response.incomplete` / `response.failed`) carrying the whole response with
 * its usage. Ids shortened.
 */

const base = {
  object: "response",
  created_at: 1_760_000_400,
  model: "gpt-4.1-2025-04-14",
  error: null,
  incomplete_details: null,
  instructions: null,
  parallel_tool_calls: true,
  store: false,
  temperature: 1,
  tool_choice: "auto",
  tools: [],
  top_p: 1,
  truncation: "disabled"
}

let sequence = 0
const event = (type: string, fields: Record<string, unknown>) => ({
  type,
  sequence_number: sequence++,
  ...fields
})

const usage = {
  input_tokens: 37,
  input_tokens_details: { cached_tokens: 12 },
  output_tokens: 11,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 48
}

const message = (id: string, text: string) => ({
  id,
  type: "message",
  status: "completed",
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [] }]
})

/** A text answer in three deltas. */
export const text: ReadonlyArray<unknown> = [
  event("response.created", {
    response: { ...base, id: "resp_text01", status: "in_progress", output: [], usage: null }
  }),
  event("response.in_progress", {
    response: { ...base, id: "resp_text01", status: "in_progress", output: [], usage: null }
  }),
  event("response.output_item.added", {
    output_index: 0,
    item: { id: "msg_01", type: "message", status: "in_progress", role: "assistant", content: [] }
  }),
  event("response.content_part.added", {
    item_id: "msg_01",
    output_index: 0,
    content_index: 0,
    part: { type: "output_text", text: "", annotations: [] }
  }),
  event("response.output_text.delta", {
    item_id: "msg_01",
    output_index: 0,
    content_index: 0,
    delta: "Hello"
  }),
  event("response.output_text.delta", {
    item_id: "msg_01",
    output_index: 0,
    content_index: 0,
    delta: " there"
  }),
  event("response.output_text.delta", { item_id: "msg_01", output_index: 0, content_index: 0, delta: "!" }),
  event("response.output_text.done", {
    item_id: "msg_01",
    output_index: 0,
    content_index: 0,
    text: "Hello there!"
  }),
  event("response.content_part.done", {
    item_id: "msg_01",
    output_index: 0,
    content_index: 0,
    part: { type: "output_text", text: "Hello there!", annotations: [] }
  }),
  event("response.output_item.done", { output_index: 0, item: message("msg_01", "Hello there!") }),
  event("response.completed", {
    response: {
      ...base,
      id: "resp_text01",
      status: "completed",
      output: [message("msg_01", "Hello there!")],
      usage
    }
  })
]

const call = (index: number, id: string, callId: string, name: string, args: string) => ({
  id,
  type: "function_call",
  status: "completed",
  call_id: callId,
  name,
  arguments: args,
  output_index: index
})

/**
 * A reasoning model: a reasoning item with a streamed summary, then two
 * function calls whose arguments stream in fragments.
 */
export const reasoningThenCalls: ReadonlyArray<unknown> = [
  event("response.created", {
    response: {
      ...base,
      id: "resp_calls02",
      model: "o4-mini-2025-04-16",
      status: "in_progress",
      output: [],
      usage: null
    }
  }),
  event("response.output_item.added", {
    output_index: 0,
    item: { id: "rs_01", type: "reasoning", summary: [] }
  }),
  event("response.reasoning_summary_part.added", {
    item_id: "rs_01",
    output_index: 0,
    summary_index: 0,
    part: { type: "summary_text", text: "" }
  }),
  event("response.reasoning_summary_text.delta", {
    item_id: "rs_01",
    output_index: 0,
    summary_index: 0,
    delta: "Two cities, "
  }),
  event("response.reasoning_summary_text.delta", {
    item_id: "rs_01",
    output_index: 0,
    summary_index: 0,
    delta: "two lookups."
  }),
  event("response.output_item.done", {
    output_index: 0,
    item: {
      id: "rs_01",
      type: "reasoning",
      summary: [{ type: "summary_text", text: "Two cities, two lookups." }]
    }
  }),
  event("response.output_item.added", {
    output_index: 1,
    item: {
      id: "fc_01",
      type: "function_call",
      status: "in_progress",
      call_id: "call_Pa1",
      name: "get_weather",
      arguments: ""
    }
  }),
  event("response.function_call_arguments.delta", { item_id: "fc_01", output_index: 1, delta: '{"city":' }),
  event("response.function_call_arguments.delta", { item_id: "fc_01", output_index: 1, delta: '"Paris"}' }),
  event("response.function_call_arguments.done", {
    item_id: "fc_01",
    output_index: 1,
    arguments: '{"city":"Paris"}'
  }),
  event("response.output_item.done", {
    output_index: 1,
    item: call(1, "fc_01", "call_Pa1", "get_weather", '{"city":"Paris"}')
  }),
  event("response.output_item.added", {
    output_index: 2,
    item: {
      id: "fc_02",
      type: "function_call",
      status: "in_progress",
      call_id: "call_Ro2",
      name: "get_weather",
      arguments: ""
    }
  }),
  event("response.function_call_arguments.delta", {
    item_id: "fc_02",
    output_index: 2,
    delta: '{"city":"Rome"}'
  }),
  event("response.function_call_arguments.done", {
    item_id: "fc_02",
    output_index: 2,
    arguments: '{"city":"Rome"}'
  }),
  event("response.output_item.done", {
    output_index: 2,
    item: call(2, "fc_02", "call_Ro2", "get_weather", '{"city":"Rome"}')
  }),
  event("response.completed", {
    response: {
      ...base,
      id: "resp_calls02",
      model: "o4-mini-2025-04-16",
      status: "completed",
      output: [
        {
          id: "rs_01",
          type: "reasoning",
          summary: [{ type: "summary_text", text: "Two cities, two lookups." }]
        },
        call(1, "fc_01", "call_Pa1", "get_weather", '{"city":"Paris"}'),
        call(2, "fc_02", "call_Ro2", "get_weather", '{"city":"Rome"}')
      ],
      usage: { ...usage, output_tokens_details: { reasoning_tokens: 64 } }
    }
  })
]

/** Cut off by `max_output_tokens`: `response.incomplete`. */
export const incomplete: ReadonlyArray<unknown> = [
  event("response.created", {
    response: { ...base, id: "resp_cut03", status: "in_progress", output: [], usage: null }
  }),
  event("response.output_text.delta", {
    item_id: "msg_03",
    output_index: 0,
    content_index: 0,
    delta: "It was a dark and"
  }),
  event("response.incomplete", {
    response: {
      ...base,
      id: "resp_cut03",
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      output: [message("msg_03", "It was a dark and")],
      usage
    }
  })
]

/** The model failed after it began: `response.failed`. */
export const failed: ReadonlyArray<unknown> = [
  event("response.created", {
    response: { ...base, id: "resp_fail04", status: "in_progress", output: [], usage: null }
  }),
  event("response.failed", {
    response: {
      ...base,
      id: "resp_fail04",
      status: "failed",
      error: { code: "server_error", message: "The model failed to generate a response." },
      output: [],
      usage: null
    }
  })
]

/** A non-streamed response body with a refusal. */
export const refusalBody = {
  ...base,
  id: "resp_ref05",
  status: "completed",
  output: [
    {
      id: "msg_05",
      type: "message",
      status: "completed",
      role: "assistant",
      content: [{ type: "refusal", refusal: "I can't help with that." }]
    }
  ],
  usage
}
