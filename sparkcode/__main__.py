from sparkcode.cli import main

main()
