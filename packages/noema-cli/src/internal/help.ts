/**
 * The help texts. Kept in a module of plain strings so `noema --help` loads
 * nothing else.
 */

const modelOptions = `Model
  -m, --model NAME      model name (env NOEMA_MODEL; default gpt-4o-mini; "offline" = built-in model)
      --base-url URL    OpenAI-compatible server (env NOEMA_BASE_URL), e.g. http://localhost:11434/v1
      --api-key KEY     API key (env OPENAI_API_KEY, or ANTHROPIC_API_KEY for anthropic); not needed
                        for local servers
      --provider openai|anthropic
                        the API the server speaks (env NOEMA_PROVIDER; default openai, which covers
                        every OpenAI-compatible server); anthropic: Claude (default claude-sonnet-5-5)
      --api chat|responses
                        Chat Completions (default; what compatible servers speak) or OpenAI's
                        Responses API (env NOEMA_OPENAI_API)
      --max-retry-wait SECONDS
                        longest wait for retries of one model call (env NOEMA_MAX_RETRY_WAIT;
                        default 60); a server asking for longer fails at once
      --context-budget TOKENS
                        compact the session when a turn would send more (env NOEMA_CONTEXT_BUDGET;
                        default 3/4 of the model's context window when known, else 32000; 0 = never):
                        older turns are summarised by the model, the originals stay saved
  Flags win over the environment. With no API key and no base URL, noema runs on its
  built-in offline model (deterministic, not an LLM) so you can try it without an account.`

const databaseOption = `      --database DB     where sessions live: a SQLite file or postgres://USER:PASSWORD@HOST/DB
                        (env NOEMA_DATABASE_URL; default $NOEMA_HOME/noema.db)`

const commonOptions = `  -h, --help            show this help
  -v, --version         show the version`

export const main = `noema: conversational agents in your terminal

Usage
  noema chat [options]              interactive chat, saved as a session
  noema ask [options] QUESTION      one question; the answer goes to stdout
  noema sessions [list]             saved sessions, newest first
  noema sessions show|delete|export ID
  noema sessions export --all       every session as JSON lines (for import elsewhere)
  noema sessions import [FILE]      sessions from JSON lines (stdin by default)
  noema threads create|list|close   threads that hold runs
  noema run "request" --thread T    a run: stages that write hashed files, shown as they go
  noema runs list|show|approve|reject|retry|cancel|resume|verify
                                    runs, their files and timeline
  noema serve [--port N]            the runs panel (threads, runs, stages, artifacts, timeline,
                                    live) and its JSON API, with a worker
  noema worker                      carry runs on; several share the runs (PostgreSQL)
  noema routine run|status FILE     a work breakdown's goals: run them, show progress
  noema plan "request"              planned as a task tree, assistants elected by similarity,
                                    subtasks supervised and evaluated; the answer at the end
  noema tasks show URN              a stored task tree: status, assistants, outputs
  noema resources ls|show|put|search resources (conversations, tasks, chunks...) and similarity search
  noema policy check --actor A --action X URN...
                                    what a policy (Cedar, OPA) decides, and why
  noema policy show                 the policy in use ($NOEMA_HOME/policy.cedar by default)
  noema COMMAND --help              help for one command

Options
${databaseOption}
${commonOptions}

${modelOptions}

Environment
  NOEMA_HOME      where sessions (noema.db) and input history live (default ~/.noema)
  NOEMA_DATABASE_URL  the session database, as --database (a password in it is never printed)
  NO_COLOR        plain output without colours
  NOEMA_DEBUG=1   print the full cause of an error

Examples
  OPENAI_API_KEY=sk-... noema chat
  noema ask --base-url http://localhost:11434/v1 --model llama3.2 "Why is the sky blue?"
  git diff | noema ask "Write a commit message for this diff:"
`

export const slashCommands = `Commands
  /help              this list
  /new               start a new session (the current one stays saved)
  /sessions          list saved sessions
  /resume ID         show an earlier session's turns and continue it (an ID prefix is enough)
  /history           show this session's turns
  /model [NAME]      show or switch the model ("offline" for the built-in one)
  /tools             list the tools the model can use
  /system [TEXT]     show or set this session's system prompt ("/system default" resets it)
  /usage             tokens used by this session and by its last turn
  /compact           summarise older turns now (the originals stay saved)
  /plan on|off       plan each message, do it step by step with the tools, show the plan as it changes
  /exit              quit (also Ctrl-D, or Ctrl-C on an empty line)
Ctrl-C while an answer is streaming cancels that turn; nothing of it is saved.
A pasted block is one message. To type several lines, end each but the last with \\.`

export const chat = `noema chat: interactive chat

Usage
  noema chat [options]

Options
  -s, --session ID      continue a saved session (see noema sessions list)
      --system TEXT     the session's system prompt (with --session: replaces that session's)
      --no-tools        do not give the model the built-in tools (calculator, current_time, read_file)
      --mcp FILE        also give it the tools of the MCP servers in FILE ({ "mcpServers": ... });
                        a server's tool not marked read-only asks for approval before each call
  -y, --yes             run every tool call without asking
${databaseOption}
${commonOptions}

${modelOptions}

${slashCommands}
`

export const ask = `noema ask: ask one question and print the answer

Usage
  noema ask [options] QUESTION...
  noema ask [options] -            read the question from stdin (also when no QUESTION is given)

With a QUESTION and piped stdin both, the model gets the question followed by the piped
text in a fenced block (git diff | noema ask "Write a commit message for this diff:").

The answer streams to stdout; tool activity goes to stderr. Each question is saved as
a session; its id is printed on stderr when stderr is a terminal.

Options
  -s, --session ID      continue a saved session instead of starting a new one
      --json            print the turn's messages as JSON instead of the answer
      --system TEXT     the session's system prompt (with --session: replaces that session's)
      --no-tools        do not give the model the built-in tools
      --mcp FILE        also give it the tools of the MCP servers in FILE ({ "mcpServers": ... });
                        a server's tool not marked read-only asks for approval before each call
  -y, --yes             run every tool call without asking
${databaseOption}
${commonOptions}

${modelOptions}

Exit status: 0 on success, 1 when the model or the store failed, 2 for a usage error,
130 when interrupted.
`

export const sessions = `noema sessions: saved conversations

Usage
  noema sessions [list] [--json]              sessions, newest first
  noema sessions show ID [--json]             one session's messages
  noema sessions delete ID                    delete a session
  noema sessions export ID [--format json|markdown]
                                              print a session for keeping or sharing (default json)
  noema sessions export --all                 every session, one JSON line each
  noema sessions import [FILE|-]              add the sessions of such lines (default: stdin);
                                              a session whose id exists already is skipped

ID may be any unique prefix of a session id. Sessions live in $NOEMA_HOME/noema.db unless
--database / NOEMA_DATABASE_URL names another. To move them, e.g. to PostgreSQL:
  noema sessions export --all > sessions.jsonl
  noema sessions import sessions.jsonl --database postgres://USER:PASSWORD@HOST/DB

Options
      --json            machine-readable output
  -f, --format FORMAT   export format: json or markdown
      --all             export every session
${databaseOption}
${commonOptions}
`
