"""The `archipelago` command (`app`): commands that talk to a running broker over its API (`client`), and those that
run a process or act on the broker's own database (`local`). Errors are one line, never a traceback."""
