print("marfafs")
