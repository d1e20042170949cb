/**
 * JsonBody: a request's JSON body, at most `limit` bytes.
 *
 * A body over the limit is answered 413, and the answer must reach the
 * client: closing the connection while the client is still sending makes its
 * side see a reset instead of the answer. So the rest of an oversized body is
 * read and thrown away (nothing of it is kept), up to `discardLimit` bytes
 * in all; only a body beyond that, or one that announces such a size, has
 * its connection closed once the answer is written.
 */
import type * as http from "node:http"
import { ApiError } from "./ApiError.js"

export interface Limits {
  /** Largest body taken, in bytes. */
  readonly limit: number
  /** Largest body read (and discarded) to answer 413 cleanly. Default 16 times `limit`. */
  readonly discardLimit?: number
}

const tooLarge = (limit: number, close: boolean) =>
  new ApiError(
    413,
    "PayloadTooLarge",
    `the body is larger than ${limit} bytes`,
    close ? { connection: "close" } : {}
  )

/** The body parsed as JSON (`{}` when empty); an ApiError (400, 413) when it is not taken. */
export const read = (request: http.IncomingMessage, limits: Limits): Promise<unknown> =>
  new Promise((resolve, reject) => {
    const { limit } = limits
    const discardLimit = limits.discardLimit ?? limit * 16
    const declared = Number(request.headers["content-length"] ?? Number.NaN)
    if (declared > discardLimit) {
      // Not worth reading: answer now, and the connection closes after the answer.
      request.resume()
      return reject(tooLarge(limit, true))
    }
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size <= limit) chunks.push(chunk)
      else if (size > discardLimit) {
        request.pause()
        reject(tooLarge(limit, true))
      }
    })
    request.on("end", () => {
      if (size > limit) return reject(tooLarge(limit, false))
      const text = Buffer.concat(chunks).toString("utf8")
      if (text.trim() === "") return resolve({})
      try {
        resolve(JSON.parse(text))
      } catch (error) {
        reject(new ApiError(400, "BadJson", `the body is not JSON: ${(error as Error).message}`))
      }
    })
    request.on("error", reject)
  })
