/**
 * @noema/cli: the `noema` command line (one `effect/cli` command tree), and the pieces
 * it is made of for programs that embed or test it.
 */

export * as Cli from "./Cli.js"
export * as CliArguments from "./CliArguments.js"
export * as CliConfig from "./CliConfig.js"
export * as CliError from "./CliError.js"
export * as Commands from "./Commands.js"
export * as ExitStatus from "./ExitStatus.js"
export * as Io from "./Io.js"
export * as OfflineModel from "./OfflineModel.js"
export * as Terminal from "./Terminal.js"
export * as TurnRunner from "./TurnRunner.js"
export * as BuiltinTools from "./tools/BuiltinTools.js"
export * as Calculator from "./tools/Calculator.js"
export * as CurrentTime from "./tools/CurrentTime.js"
export * as ReadFile from "./tools/ReadFile.js"
