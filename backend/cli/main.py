"""The `ablate` command line."""

from __future__ import annotations

from ablate.backend import __version__
from ablate.backend.cli import ci, db, hygiene, releases, results, study, tokens, webhooks
from ablate.backend.cli.advise import app as advise_app
from ablate.backend.cli.common import App, console
from ablate.backend.cli.config_docs import config_docs
from ablate.backend.cli.demo import demo
from ablate.backend.cli.dispatcher import dispatcher
from ablate.backend.cli.report import report
from ablate.backend.cli.serve import serve

app = App(help="Ablate: what each optimisation in a training-image release is worth.", no_args_is_help=True)
app.add_typer(db.app, name="db")
app.add_typer(tokens.app, name="token")
app.add_typer(results.app, name="results")
app.add_typer(ci.app, name="ci")
app.add_typer(releases.app, name="release")
app.add_typer(study.app, name="study")
app.add_typer(hygiene.run_app, name="run")
app.add_typer(advise_app, name="advise")
app.add_typer(webhooks.app, name="webhook")
app.command()(serve)
app.command()(demo)
app.command("report")(report)
app.command("config-docs")(config_docs)
app.command("dispatcher")(dispatcher)


@app.command()
def version() -> None:
    """Print the version."""
    console.print(f"ablate {__version__}")


if __name__ == "__main__":
    app()
