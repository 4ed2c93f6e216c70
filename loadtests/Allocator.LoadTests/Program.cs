Console.WriteLine("usage: dotnet run -c Release --project loadtests/Allocator.LoadTests -- <workload>");
return 0;
