/**
 * Graph: linked data extracted from text, in an RDF store of its own (`n3`),
 * kept apart from resources, and queried by the model through a tool.
 *
 * Statements come in two ways, each into a named graph that is the source
 * resource's URN (so every triple says where it came from):
 * - `statementsOf` reads the deterministic format the planner asks its leaves to
 *   end their answers with, one statement per line, `fact: subject | predicate |
 *   object` (`factFormat`): no model call, and the same statements again when a
 *   stored output is read back (a resumed plan rebuilds its graph from the store);
 * - `extract` asks the model for the statements of any text (a document, a chunk),
 *   as structured output.
 * `query` matches a triple pattern (any of the three may be left open). `tool`
 * is that query as the `graph_query` tool; `toolFor(readable)` is the same tool
 * answering only with statements whose source the asker may read (the policy
 * decides, as for every access).
 */
import { type ChatModel, Message, StructuredOutput, Tool } from "@noema/core"
import type { Resource } from "@noema/resources"
import { Effect, Schema } from "effect"
import * as N3 from "n3"

const { namedNode, literal, quad } = N3.DataFactory

export const Triple = Schema.Struct({
  subject: Schema.String,
  predicate: Schema.String,
  object: Schema.String
})
export type Triple = typeof Triple.Type

export interface Match extends Triple {
  /** The URN of the resource the statement was extracted from. */
  readonly source: string
}

export class GraphError extends Schema.TaggedError<GraphError>()("GraphError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

const base = "urn:noema:graph:"
const term = (name: string) => namedNode(`${base}${encodeURIComponent(name.trim().toLowerCase())}`)
const nameOf = (iri: string) => decodeURIComponent(iri.startsWith(base) ? iri.slice(base.length) : iri)

/** What a leaf is told, so that its answer's facts reach the graph (read back by `statementsOf`). */
export const factFormat =
  "End your answer with the facts it establishes that others may need, one per line, as: fact: subject | predicate | object"

const factLine = /^\s*(?:[-*]\s*)?fact:\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*(.+?)\s*$/i

/** The statements `text` makes in the `factFormat` lines (other lines are not statements). */
export const statementsOf = (text: string): Array<Triple> =>
  text.split("\n").flatMap((line) => {
    const match = factLine.exec(line)
    return match === null ? [] : [{ subject: match[1]!, predicate: match[2]!, object: match[3]! }]
  })

const Pattern = Schema.Struct({
  // A schema-following model sends null for what it leaves open: the same as leaving it out.
  subject: Schema.optionalKey(Schema.NullOr(Schema.String)),
  predicate: Schema.optionalKey(Schema.NullOr(Schema.String)),
  object: Schema.optionalKey(Schema.NullOr(Schema.String))
})

export interface Graph {
  readonly size: () => number
  readonly add: (source: string, triples: ReadonlyArray<Triple>) => void
  readonly query: (pattern: Partial<Triple>, limit?: number) => Array<Match>
  /** Extracts the statements of a text resource with the model and adds them; how many were added. */
  readonly extract: (
    model: ChatModel.Service,
    resource: Resource.Resource,
    text: string
  ) => Effect.Effect<number, GraphError>
  readonly tool: Tool.Any
  /** `graph_query` answering only with statements whose source `readable` says the asker may read. */
  readonly toolFor: (readable: (source: string) => Effect.Effect<boolean>) => Tool.Any
}

export const make = (): Graph => {
  const store = new N3.Store()
  // The handler reads `graph` when called, after it is made.
  const queryTool = (readable: (source: string) => Effect.Effect<boolean>): Tool.Any =>
    Tool.make({
      name: "graph_query",
      description:
        "Look up facts extracted from the documents and the other tasks' answers: give any of subject, predicate, object (leave the others out) to get the matching statements and where they come from.",
      parameters: Pattern,
      handler: (pattern) =>
        Effect.gen(function* () {
          const asked = graph.query({
            ...(typeof pattern.subject === "string" ? { subject: pattern.subject } : {}),
            ...(typeof pattern.predicate === "string" ? { predicate: pattern.predicate } : {}),
            ...(typeof pattern.object === "string" ? { object: pattern.object } : {})
          })
          const found = yield* Effect.filter(asked, (match) => readable(match.source))
          return found.length === 0
            ? "No matching statements."
            : found.map((m) => `${m.subject} ${m.predicate} ${m.object}  (from ${m.source})`).join("\n")
        })
    }) as Tool.Any
  const graph: Graph = {
    size: () => store.size,
    add: (source, triples) => {
      for (const triple of triples) {
        // Subjects and predicates are things; objects are kept as literals (what the text said).
        store.addQuad(
          quad(term(triple.subject), term(triple.predicate), literal(triple.object), namedNode(source))
        )
      }
    },
    query: (pattern, limit = 50) =>
      store
        .getQuads(
          pattern.subject === undefined ? null : term(pattern.subject),
          pattern.predicate === undefined ? null : term(pattern.predicate),
          pattern.object === undefined ? null : literal(pattern.object),
          null
        )
        .slice(0, limit)
        .map((q) => ({
          subject: nameOf(q.subject.value),
          predicate: nameOf(q.predicate.value),
          object: q.object.value,
          source: q.graph.value
        })),
    extract: (model, resource, text) =>
      StructuredOutput.generate(model, {
        schema: Schema.Struct({ triples: Schema.Array(Triple) }),
        name: "statements",
        messages: [
          Message.system(
            "Extract the facts the text states as (subject, predicate, object) triples. Use short lowercase names; objects as the text says them."
          ),
          Message.user(text)
        ]
      }).pipe(
        Effect.map(({ triples }) => {
          graph.add(resource.meta.urn, triples)
          return triples.length
        }),
        Effect.mapError(
          (error) =>
            new GraphError({
              message: `extracting statements from ${resource.meta.urn}: ${error.message}`,
              cause: error
            })
        )
      ),
    tool: queryTool(() => Effect.succeed(true)),
    toolFor: queryTool
  }
  return graph
}
