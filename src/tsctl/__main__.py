"""``python -m tsctl`` runs the command line."""

from tsctl.cli import app

app(prog_name="tsctl")
