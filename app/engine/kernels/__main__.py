from app.engine.kernels import main

main()
