from connector.cli import run

run()
