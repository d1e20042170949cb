/**
 * Graph: linked data extracted from text, in an RDF store of its own (`n3`),
 * kept apart from resources, and queried by the model through a tool.
 *
 * `extract` asks the model for the (subject, predicate, object) statements a
 * text resource makes and adds them to the store, in a named graph that is the
 * resource's URN (so every triple says where it came from). `query` matches a
 * triple pattern (any of the three may be left open). `tool` is that query as
 * a tool for agents: `graph_query`.
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
}

export const make = (): Graph => {
  const store = new N3.Store()
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
    tool: Tool.make({
      name: "graph_query",
      description:
        "Look up facts extracted from the documents: give any of subject, predicate, object (leave the others out) to get the matching statements and where they come from.",
      parameters: Schema.Struct({
        subject: Schema.optional(Schema.String),
        predicate: Schema.optional(Schema.String),
        object: Schema.optional(Schema.String)
      }),
      handler: (pattern) =>
        Effect.sync(() => {
          const found = graph.query({
            ...(pattern.subject === undefined ? {} : { subject: pattern.subject }),
            ...(pattern.predicate === undefined ? {} : { predicate: pattern.predicate }),
            ...(pattern.object === undefined ? {} : { object: pattern.object })
          })
          return found.length === 0
            ? "No matching statements."
            : found.map((m) => `${m.subject} ${m.predicate} ${m.object}  (from ${m.source})`).join("\n")
        })
    }) as Tool.Any
  }
  return graph
}
