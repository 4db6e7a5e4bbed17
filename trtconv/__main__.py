from trtconv.cli.main import main

main()
