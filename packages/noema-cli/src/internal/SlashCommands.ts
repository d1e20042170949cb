/**
 * SlashCommands: what `noema chat` takes besides messages, as `/help` and
 * `noema chat --help` list it.
 */
export const text = `Commands
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
Ctrl-C while an answer is streaming cancels that turn; what was shown is kept, marked interrupted.
A pasted block is one message. To type several lines, end each but the last with \\.`
