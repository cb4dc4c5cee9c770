from connector.cli import main

main()
