from pydla.entry import main

main()
