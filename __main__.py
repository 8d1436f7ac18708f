from attnprof.cli import main

main()
