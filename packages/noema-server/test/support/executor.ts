/**
 * What the panel's tests share: an executor over their runs store whose stages are never
 * the point (its model answers "x").
 */
import { ScriptedChatModel } from "@noema/core/testing"
import { Executor, type RunsStore } from "@noema/runs"

export const idleExecutor = (store: RunsStore.Service, workspace: string) =>
  Executor.make({ store, workspace, model: ScriptedChatModel.make({ fallback: () => "x" }) })
