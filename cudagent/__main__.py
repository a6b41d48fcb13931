from cudagent.cli import main

main()
